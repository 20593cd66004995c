import Foundation
import PostgreSQL
import RelayCarriage
import Storage

/// The relay carriage on PostgreSQL (the same rows as SQLite's, plus `relay_carrier`), shared by every gateway
/// process on the database. One mailbox for the gateway whichever node made it first, and one carrier at a time:
/// a lease on the database's clock (never a node's), renewed by the carrier and taken over by any node once it ran
/// out, so a dead carrier costs at most the lease and nothing sent twice is lost (a phone's line never moves back).
public struct PostgresRelayCarriageStore: RelayCarriageStore {
    public static let migrations = [
        PostgresMigration(module: "relaycarriage", version: 1, sql: """
            CREATE TABLE relay_mailbox (id INTEGER PRIMARY KEY CHECK (id = 1), url TEXT NOT NULL, mailbox_id TEXT NOT NULL, bearer TEXT NOT NULL);
            CREATE TABLE relay_devices (
                device_id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                secret BYTEA NOT NULL,
                last_seq BIGINT NOT NULL DEFAULT 0,
                registered BOOLEAN NOT NULL DEFAULT FALSE,
                revoked BOOLEAN NOT NULL DEFAULT FALSE
            );
            CREATE TABLE relay_carrier (id INTEGER PRIMARY KEY CHECK (id = 1), node TEXT NOT NULL, lease_until BIGINT NOT NULL);
            """),
    ]

    let pool: PostgresPool
    let seal: RelaySecretSeal

    public init(pool: PostgresPool, sealingKey: [UInt8]) {
        self.pool = pool
        seal = RelaySecretSeal(key: sealingKey)
    }

    public func mailbox(url: String) async throws -> RelayMailboxAccess? {
        try await pool.withConnection { db in try Self.mailbox(url: url, seal: seal, in: db) }
    }

    static func mailbox(url: String, seal: RelaySecretSeal, in db: PostgresConnection) throws -> RelayMailboxAccess? {
        guard let row = try db.query("SELECT mailbox_id, bearer FROM relay_mailbox WHERE id = 1 AND url = $1", url).first,
              let id = row.string("mailbox_id"), let sealed = row.string("bearer"), let bearer = seal.openBearer(sealed) else { return nil }
        return RelayMailboxAccess(id: id, bearer: bearer)
    }

    public func saveMailbox(url: String, _ mailbox: RelayMailboxAccess) async throws -> RelayMailboxAccess {
        let sealed = try seal.sealBearer(mailbox.bearer)
        return try await pool.transaction { db in
            // A node racing to save its own waits on the row, then keeps the first one for the same relay.
            try db.run("""
                INSERT INTO relay_mailbox (id, url, mailbox_id, bearer) VALUES (1, $1, $2, $3)
                ON CONFLICT (id) DO UPDATE SET url = excluded.url, mailbox_id = excluded.mailbox_id, bearer = excluded.bearer
                WHERE relay_mailbox.url <> excluded.url
                """, url, mailbox.id, sealed)
            return try Self.mailbox(url: url, seal: seal, in: db) ?? mailbox
        }
    }

    public func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) async throws {
        let sealed = try seal.sealSecret(secret, deviceID: deviceID)
        try await pool.transaction { db in
            _ = try db.run("""
                INSERT INTO relay_devices (device_id, subject, secret, last_seq, registered, revoked) VALUES ($1, $2, $3, $4, FALSE, FALSE)
                ON CONFLICT (device_id) DO UPDATE SET subject = excluded.subject, secret = excluded.secret, last_seq = excluded.last_seq,
                    registered = FALSE, revoked = FALSE
                """, deviceID, subject, sealed, after)
        }
    }

    public func markRegistered(_ deviceID: String) async throws {
        try await pool.transaction { db in _ = try db.run("UPDATE relay_devices SET registered = TRUE WHERE device_id = $1", deviceID) }
    }

    public func markRevoked(_ deviceID: String) async throws {
        try await pool.transaction { db in _ = try db.run("UPDATE relay_devices SET revoked = TRUE WHERE device_id = $1 AND NOT revoked", deviceID) }
    }

    public func forgetRevoked(_ deviceID: String) async throws {
        try await pool.transaction { db in _ = try db.run("DELETE FROM relay_devices WHERE device_id = $1 AND revoked", deviceID) }
    }

    public func phones() async throws -> [RelayPhone] {
        try await pool.withConnection { db in
            try db.query("SELECT * FROM relay_devices ORDER BY device_id").compactMap { row in
                guard let id = row.string("device_id"), let stored = row.bytes("secret"), let secret = seal.openSecret(stored, deviceID: id),
                      let subject = row.string("subject") else { return nil }
                return RelayPhone(id: id, subject: subject, secret: secret, lastSeq: row.int("last_seq") ?? 0,
                                  registered: row.bool("registered") == true, revoked: row.bool("revoked") == true)
            }
        }
    }

    public func secret(deviceID: String) async throws -> [UInt8]? {
        try await pool.withConnection { db in try db.query("SELECT secret FROM relay_devices WHERE device_id = $1", deviceID).first?.bytes("secret") }
            .flatMap { seal.openSecret($0, deviceID: deviceID) }
    }

    public func advance(_ deviceID: String, to seq: Int64) async throws {
        try await pool.transaction { db in
            _ = try db.run("UPDATE relay_devices SET last_seq = $2 WHERE device_id = $1 AND last_seq < $2", deviceID, seq)
        }
    }

    public func holdCarriage(node: String, lease: Duration) async throws -> Bool {
        let leaseMS = lease.components.seconds * 1000 + lease.components.attoseconds / 1_000_000_000_000_000
        return try await pool.transaction { db in
            // The holder renews; anyone takes a lease that ran out. The row lock makes racing takers queue, and each
            // re-checks the condition against the winner's row.
            !(try db.query("""
                INSERT INTO relay_carrier (id, node, lease_until)
                VALUES (1, $1, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT + $2)
                ON CONFLICT (id) DO UPDATE SET node = excluded.node, lease_until = excluded.lease_until
                WHERE relay_carrier.node = excluded.node OR relay_carrier.lease_until < (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT
                RETURNING node
                """, node, leaseMS).isEmpty)
        }
    }
}
