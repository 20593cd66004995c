import Foundation
import Identity
import Storage

/// The people of a household and their pairing codes, on any engine (`SQLiteHouseholdStore` in the data
/// directory's file, `PostgresHouseholdStore` on a database several gateways share).
///
/// Whatever the engine, codes are short-lived (`PairingCodes.lifetime`), single-use, 80 random bits, and stored only
/// as SHA-256; redeeming one mints a managed key carrying the person's subject and role, through the key store's
/// session-taking mint, in the redemption's own transaction. Writes take the caller's session, so a route's effect
/// commits with its answer; the extension below runs each in a transaction of its own.
public protocol HouseholdStore: Sendable {
    /// The engine seam's view of the store's database: what routes build their answers in.
    var transactions: any TransactionalStorage { get }

    /// The subject for a person's name (`HouseholdNames.slug`), recording the person inside the caller's transaction
    /// when new. The same name always gives the same subject; a different person whose name slugs the same gets -2, -3, …
    func subject(forName name: String, in session: any StorageSession) throws -> String
    /// A new code for `subject` with `role`, valid `PairingCodes.lifetime` from `now`, stored inside the caller's
    /// transaction. `madeBy`: the subject asking (the key it pairs shows it as `minted_by`); `createdBy`: the asking
    /// key's id, nil at the console.
    func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?, now: Date,
                     in session: any StorageSession) throws -> PairingOffer
    /// Redeems a code (spaces, dashes and case forgiven) inside the caller's transaction: marking it used and minting
    /// its key commit together or not at all, and of any number of concurrent redemptions, across gateways, exactly
    /// one mints. Throws `PairingError` for an unknown, expired or already used code.
    func redeem(code: String, deviceName: String, now: Date, in session: any StorageSession) throws -> MintedKey
    /// The person's name as given when paired ("Owner" for the owner); nil for a subject nobody was paired as.
    func displayName(subject: String, in session: any StorageSession) throws -> String?
    /// The same, read outside any transaction.
    func displayName(subject: String) async throws -> String?
}

extension HouseholdStore {
    /// The subject for a person's name, in a transaction of its own.
    public func subject(forName name: String) async throws -> String {
        try await transactions.withTransaction { session in try subject(forName: name, in: session) }
    }

    /// A new code, in a transaction of its own.
    public func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?,
                            now: Date = Date()) async throws -> PairingOffer {
        try await transactions.withTransaction { session in
            try createOffer(subject: subject, name: name, role: role, createdBy: keyID, madeBy: maker, now: now, in: session)
        }
    }

    /// Redeems a code in a transaction of its own.
    public func redeem(code: String, deviceName: String, now: Date = Date()) async throws -> MintedKey {
        try await transactions.withTransaction { session in try redeem(code: code, deviceName: deviceName, now: now, in: session) }
    }
}
