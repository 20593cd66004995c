import Foundation
import Household
import Identity
import PostgreSQL
import Storage

/// The household's members and pairing codes on PostgreSQL, shared by every gateway on the database: codes stored
/// only as SHA-256 (`PairingCodes`). A code is used by one conditional UPDATE … RETURNING, so of gateways redeeming
/// it at once exactly one mints its key, through the key store's session-taking mint in the same transaction; the
/// database must hold `PostgresAPIKeyStore.migrations` too.
public final class PostgresHouseholdStore: HouseholdStore {
    /// The same tables as SQLite's (`household.1` and the later `created_by_subject`), times in milliseconds, hashes
    /// as BYTEA.
    public static let migrations = [
        PostgresMigration(module: "household", version: 1, sql: """
            CREATE TABLE household_members (
                subject TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                created_at BIGINT NOT NULL
            );
            CREATE TABLE pairing_codes (
                code_sha256 BYTEA PRIMARY KEY,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                created_by_key TEXT,
                created_by_subject TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                redeemed_at BIGINT,
                redeemed_key TEXT
            );
            CREATE INDEX pairing_codes_by_expiry ON pairing_codes (expires_at);
            """),
    ]

    let pool: PostgresPool
    public var transactions: any TransactionalStorage { pool }
    /// The key store whose session-taking mint a redemption uses: the code and its new key commit in one transaction.
    let keys: any APIKeyStore

    public init(pool: PostgresPool, keys: any APIKeyStore) {
        self.pool = pool
        self.keys = keys
    }

    public func subject(forName name: String, in session: any StorageSession) throws -> String {
        let db = try session.postgresConnection()
        return try HouseholdNames.subject(forName: name, nameOf: { subject in
            try db.query("SELECT name FROM household_members WHERE subject = $1", subject).first?.string("name")
        }, claim: { subject, name in
            // Another gateway may record the same subject at the same moment: the loser inserts nothing and looks again.
            try db.run("INSERT INTO household_members (subject, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (subject) DO NOTHING",
                       subject, name, Date().postgresMillis) == 1
        })
    }

    public func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?, now: Date,
                            in session: any StorageSession) throws -> PairingOffer {
        let db = try session.postgresConnection()
        let code = PairingCodes.newCode()
        let expires = now.addingTimeInterval(PairingCodes.lifetime)
        try db.run("""
            INSERT INTO pairing_codes (code_sha256, subject, role, created_by_key, created_by_subject, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
            """, PairingCodes.stored(code), subject, role.rawValue, keyID, maker, now.postgresMillis, expires.postgresMillis)
        try db.run("DELETE FROM pairing_codes WHERE expires_at < $1", now.addingTimeInterval(-PairingCodes.keptAfterExpiry).postgresMillis)
        return PairingOffer(code: code, subject: subject, name: name, role: role, expiresAt: expires)
    }

    public func redeem(code typed: String, deviceName: String, now: Date, in session: any StorageSession) throws -> MintedKey {
        let db = try session.postgresConnection()
        let hash = PairingCodes.stored(typed)
        let at = now.postgresMillis
        // One statement uses the code: a concurrent redeemer waits on the row, then finds it used and gets nothing.
        guard let row = try db.query("""
            UPDATE pairing_codes SET redeemed_at = $1 WHERE code_sha256 = $2 AND redeemed_at IS NULL AND expires_at > $1
            RETURNING subject, role, created_by_subject
            """, at, hash).first else {
            // Not used now: say why, in the order SQLite's store does.
            guard let row = try db.query("SELECT redeemed_at FROM pairing_codes WHERE code_sha256 = $1", hash).first else { throw PairingError.unknownCode }
            throw row.int("redeemed_at") != nil ? PairingError.alreadyUsed : PairingError.expired
        }
        let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
        let subject = row.string("subject") ?? Principal.ownerSubject
        // Counted in the redeeming transaction; refusing rolls it back, so the code stays unused. Two redemptions for
        // one person at once may both pass at the bound's edge: it bounds growth, not an exact count.
        let active = try db.query("SELECT COUNT(*) AS n FROM api_keys WHERE subject IN ($1, $2) AND (revoked_at IS NULL OR created_at > $3)",
                                  subject, APIKeyTokens.storedSubjects(of: subject), now.addingTimeInterval(-PairingCodes.keyWindow).postgresMillis).first?.int("n") ?? 0
        guard active < PairingCodes.maximumKeysPerPerson else { throw PairingError.tooManyKeys }
        let minted = try keys.mint(name: deviceName, subject: subject, role: role, kind: .managed,
                                   mintedBy: row.string("created_by_subject"), in: session)
        try db.run("UPDATE pairing_codes SET redeemed_key = $1 WHERE code_sha256 = $2", minted.key.id, hash)
        return minted
    }

    public func displayName(subject: String, in session: any StorageSession) throws -> String? {
        if subject == Principal.ownerSubject { return HouseholdNames.ownerName }
        return try session.postgresConnection().query("SELECT name FROM household_members WHERE subject = $1", subject).first?.string("name")
    }

    public func displayName(subject: String) async throws -> String? {
        if subject == Principal.ownerSubject { return HouseholdNames.ownerName }
        return try await pool.withConnection { db in try db.query("SELECT name FROM household_members WHERE subject = $1", subject).first?.string("name") }
    }
}
