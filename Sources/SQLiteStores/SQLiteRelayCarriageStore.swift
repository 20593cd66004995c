import Foundation
import RelayCarriage
import SQLite

/// The relay carriage's rows in the gateway's SQLite file (`relay_mailbox`, `relay_devices`). Only this process
/// writes the file, so it always carries the relay traffic.
public struct SQLiteRelayCarriageStore: RelayCarriageStore {
    let database: DatabasePool
    let seal: RelaySecretSeal

    /// Opens the store and seals any secret an earlier version kept in the clear.
    public init(database: DatabasePool, sealingKey: [UInt8]) throws {
        self.database = database
        seal = RelaySecretSeal(key: sealingKey)
        try sealLegacySecrets()
    }

    public func mailbox(url: String) async throws -> RelayMailboxAccess? {
        try await database.asyncRead { db in try Self.mailbox(url: url, seal: seal, in: db) }
    }

    static func mailbox(url: String, seal: RelaySecretSeal, in db: Connection) throws -> RelayMailboxAccess? {
        guard let row = try db.query("SELECT mailbox_id, bearer FROM relay_mailbox WHERE id = 1 AND url = ?", url).first,
              let id = row.string("mailbox_id"), let sealed = row.string("bearer"), let bearer = seal.openBearer(sealed) else { return nil }
        return RelayMailboxAccess(id: id, bearer: bearer)
    }

    public func saveMailbox(url: String, _ mailbox: RelayMailboxAccess) async throws -> RelayMailboxAccess {
        let sealed = try seal.sealBearer(mailbox.bearer)
        return try await database.asyncTransaction { db in
            try db.run("""
                INSERT INTO relay_mailbox (id, url, mailbox_id, bearer) VALUES (1, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET url = excluded.url, mailbox_id = excluded.mailbox_id, bearer = excluded.bearer
                WHERE relay_mailbox.url <> excluded.url
                """, url, mailbox.id, sealed)
            return try Self.mailbox(url: url, seal: seal, in: db) ?? mailbox
        }
    }

    public func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) async throws {
        let sealed = try seal.sealSecret(secret, deviceID: deviceID)
        try await database.asyncTransaction { db in
            _ = try db.run("INSERT OR REPLACE INTO relay_devices (device_id, subject, secret, last_seq, registered) VALUES (?, ?, ?, ?, 0)",
                           deviceID, subject, sealed, after)
        }
    }

    /// Earlier versions kept the 32-byte pairing secrets and the mailbox bearer in the clear: seal them in place.
    private func sealLegacySecrets() throws {
        let sealedAny = try database.transaction { db -> Bool in
            var sealedAny = false
            for row in try db.query("SELECT device_id, secret FROM relay_devices") {
                guard let id = row.string("device_id"), let stored = row.blob("secret"), stored.count == 32 else { continue }
                try db.run("UPDATE relay_devices SET secret = ? WHERE device_id = ?", try seal.sealSecret(stored, deviceID: id), id)
                sealedAny = true
            }
            if let bearer = try db.query("SELECT bearer FROM relay_mailbox WHERE id = 1").first?.string("bearer"), seal.isClearBearer(bearer) {
                try db.run("UPDATE relay_mailbox SET bearer = ? WHERE id = 1", try seal.sealBearer(bearer))
                sealedAny = true
            }
            return sealedAny
        }
        // The clear versions are still in the WAL's older frames until it is emptied.
        if sealedAny { try database.write { try $0.checkpointAndTruncate() } }
    }

    public func markRegistered(_ deviceID: String) async throws {
        try await database.asyncTransaction { db in _ = try db.run("UPDATE relay_devices SET registered = 1 WHERE device_id = ?", deviceID) }
    }

    public func markRevoked(_ deviceID: String) async throws {
        try await database.asyncTransaction { db in _ = try db.run("UPDATE relay_devices SET revoked = 1 WHERE device_id = ? AND revoked = 0", deviceID) }
    }

    public func forgetRevoked(_ deviceID: String) async throws {
        try await database.asyncTransaction { db in _ = try db.run("DELETE FROM relay_devices WHERE device_id = ? AND revoked = 1", deviceID) }
    }

    public func phones() async throws -> [RelayPhone] {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM relay_devices ORDER BY device_id").compactMap { row in
                guard let id = row.string("device_id"), let stored = row.blob("secret"), let secret = seal.openSecret(stored, deviceID: id),
                      let subject = row.string("subject") else { return nil }
                return RelayPhone(id: id, subject: subject, secret: secret, lastSeq: row.int("last_seq") ?? 0,
                                  registered: row.bool("registered") == true, revoked: row.bool("revoked") == true)
            }
        }
    }

    public func secret(deviceID: String) async throws -> [UInt8]? {
        try await database.asyncRead { db in try db.query("SELECT secret FROM relay_devices WHERE device_id = ?", deviceID).first?.blob("secret") }
            .flatMap { seal.openSecret($0, deviceID: deviceID) }
    }

    public func advance(_ deviceID: String, to seq: Int64) async throws {
        try await database.asyncTransaction { db in
            _ = try db.run("UPDATE relay_devices SET last_seq = ? WHERE device_id = ? AND last_seq < ?", seq, deviceID, seq)
        }
    }

    public func holdCarriage(node: String, lease: Duration) async throws -> Bool { true }
}
