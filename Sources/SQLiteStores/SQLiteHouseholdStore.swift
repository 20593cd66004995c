import Foundation
import Household
import Identity
import SQLite
import Storage

/// The household's members and pairing codes in the gateway's SQLite file (`household_members`, `pairing_codes`):
/// codes stored only as SHA-256 (`PairingCodes`), a redeemed code's key minted by the key store in the same
/// transaction.
public final class SQLiteHouseholdStore: HouseholdStore {
    public let database: DatabasePool
    public var transactions: any TransactionalStorage { database }
    /// The key store whose session-taking mint a redemption uses: the code and its new key commit in one transaction.
    let keys: any APIKeyStore

    public init(database: DatabasePool, keys: any APIKeyStore) {
        self.database = database
        self.keys = keys
    }

    public func subject(forName name: String, in session: any StorageSession) throws -> String {
        let db = try session.sqliteConnection()
        return try HouseholdNames.subject(forName: name, nameOf: { subject in
            try db.query("SELECT name FROM household_members WHERE subject = ?", subject).first?.string("name")
        }, claim: { subject, name in
            // One writer at a time: a subject read as free is still free here.
            try db.run("INSERT INTO household_members (subject, name, created_at) VALUES (?, ?, ?)", subject, name, Date().sqliteMillis)
            return true
        })
    }

    public func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?, now: Date,
                            in session: any StorageSession) throws -> PairingOffer {
        let db = try session.sqliteConnection()
        let code = PairingCodes.newCode()
        let expires = now.addingTimeInterval(PairingCodes.lifetime)
        try db.run("""
            INSERT INTO pairing_codes (code_sha256, subject, role, created_by_key, created_by_subject, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
            """, PairingCodes.stored(code), subject, role.rawValue, keyID, maker, now.sqliteMillis, expires.sqliteMillis)
        try db.run("DELETE FROM pairing_codes WHERE expires_at < ?", now.addingTimeInterval(-PairingCodes.keptAfterExpiry).sqliteMillis)
        return PairingOffer(code: code, subject: subject, name: name, role: role, expiresAt: expires)
    }

    public func redeem(code typed: String, deviceName: String, now: Date, in session: any StorageSession) throws -> MintedKey {
        let db = try session.sqliteConnection()
        let hash = PairingCodes.stored(typed)
        guard let row = try db.query("SELECT subject, role, created_by_subject, expires_at, redeemed_at FROM pairing_codes WHERE code_sha256 = ?", hash).first else {
            throw PairingError.unknownCode
        }
        if row.int("redeemed_at") != nil { throw PairingError.alreadyUsed }
        if (row.int("expires_at") ?? 0) <= now.sqliteMillis { throw PairingError.expired }
        // Used before its key is minted, and only if still unused: the count says this redemption is the one.
        guard try db.run("UPDATE pairing_codes SET redeemed_at = ? WHERE code_sha256 = ? AND redeemed_at IS NULL", now.sqliteMillis, hash) == 1 else {
            throw PairingError.alreadyUsed
        }
        let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
        let subject = row.string("subject") ?? Principal.ownerSubject
        // Counted in the redeeming transaction; refusing rolls it back, so the code stays unused.
        let active = try db.query("SELECT COUNT(*) AS n FROM api_keys WHERE subject IN (?, ?) AND (revoked_at IS NULL OR created_at > ?)",
                                  subject, APIKeyTokens.storedSubjects(of: subject), now.addingTimeInterval(-PairingCodes.keyWindow).sqliteMillis).first?.int("n") ?? 0
        guard active < PairingCodes.maximumKeysPerPerson else { throw PairingError.tooManyKeys }
        let minted = try keys.mint(name: deviceName, subject: subject, role: role, kind: .managed,
                                   mintedBy: row.string("created_by_subject"), in: session)
        try db.run("UPDATE pairing_codes SET redeemed_key = ? WHERE code_sha256 = ?", minted.key.id, hash)
        return minted
    }

    public func displayName(subject: String, in session: any StorageSession) throws -> String? {
        if subject == Principal.ownerSubject { return HouseholdNames.ownerName }
        return try session.sqliteConnection().query("SELECT name FROM household_members WHERE subject = ?", subject).first?.string("name")
    }

    public func displayName(subject: String) async throws -> String? {
        if subject == Principal.ownerSubject { return HouseholdNames.ownerName }
        return try await database.asyncRead { db in try db.query("SELECT name FROM household_members WHERE subject = ?", subject).first?.string("name") }
    }
}
