import Crypto
import Foundation
import SQLite

/// The relay's storage: mailboxes, the phones in each, their down items and their held commands.
/// It holds only ciphertext, sequence numbers, cursors and SHA-256 hashes of bearers; it can read nothing.
public final class MailboxStore: Sendable {
    public static let migrations: [Migration] = [
        Migration("relay.1", """
            CREATE TABLE mailboxes (id TEXT PRIMARY KEY, secret_sha256 BLOB NOT NULL, last_seen INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE mailbox_devices (
                mailbox_id TEXT NOT NULL, device_id TEXT NOT NULL, secret_sha256 BLOB NOT NULL,
                carriage_on INTEGER NOT NULL DEFAULT 1, cursor INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (mailbox_id, device_id)
            );
            CREATE TABLE mailbox_items (
                mailbox_id TEXT NOT NULL, device_id TEXT NOT NULL, n INTEGER NOT NULL,
                ciphertext TEXT, too_large INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (mailbox_id, device_id, n)
            );
            CREATE TABLE mailbox_apns (
                mailbox_id TEXT NOT NULL, device_id TEXT NOT NULL, token TEXT NOT NULL, environment TEXT NOT NULL,
                PRIMARY KEY (mailbox_id, device_id)
            );
            CREATE TABLE mailbox_commands (
                mailbox_id TEXT NOT NULL, device_id TEXT NOT NULL, id TEXT NOT NULL, ciphertext TEXT NOT NULL, received_at INTEGER NOT NULL,
                PRIMARY KEY (mailbox_id, device_id, id)
            );
            """),
        // Down items carry the gateway's store sequence (records) and their kind, so a cursor ack can drop the
        // records a phone has seen without touching a result it has not read.
        Migration("relay.2-item-kind", """
            ALTER TABLE mailbox_items ADD COLUMN kind TEXT NOT NULL DEFAULT 'record';
            ALTER TABLE mailbox_items ADD COLUMN seq INTEGER;
            """),
    ]

    public let database: DatabasePool
    /// Seconds since its last poll within which the gateway counts as online.
    public let onlineWindow: TimeInterval

    public init(path: String, onlineWindow: TimeInterval = 10) throws {
        database = try DatabasePool(path: path, readerCount: 2)
        self.onlineWindow = onlineWindow
        try database.migrate(Self.migrations)
    }

    static func now() -> Int64 { Date().sqliteMillis }

    public func createMailbox(secretSHA256: [UInt8]) throws -> String {
        let id = "mbx_" + Hex.encode(SecureBytes.random(count: 12))
        try database.transaction { db in try db.run("INSERT INTO mailboxes (id, secret_sha256) VALUES (?, ?)", id, secretSHA256) }
        return id
    }

    public func mailboxSecret(_ id: String) throws -> [UInt8]? {
        try database.read { db in try db.query("SELECT secret_sha256 FROM mailboxes WHERE id = ?", id).first?.blob("secret_sha256") }
    }

    public func deviceSecret(mailbox: String, device: String) throws -> [UInt8]? {
        try database.read { db in try db.query("SELECT secret_sha256 FROM mailbox_devices WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.blob("secret_sha256") }
    }

    public func touch(mailbox: String) throws {
        try database.transaction { db in try db.run("UPDATE mailboxes SET last_seen = ? WHERE id = ?", Self.now(), mailbox) }
    }

    public func isOnline(mailbox: String) -> Bool {
        let seen = (try? database.read { db in try db.query("SELECT last_seen FROM mailboxes WHERE id = ?", mailbox).first?.int("last_seen") }) ?? 0
        return Double(Self.now() - seen) / 1000 < onlineWindow
    }

    public func putDevice(mailbox: String, device: String, secretSHA256: [UInt8], cursor: Int64) throws {
        try database.transaction { db in
            try db.run("""
                INSERT INTO mailbox_devices (mailbox_id, device_id, secret_sha256, cursor) VALUES (?, ?, ?, ?)
                ON CONFLICT (mailbox_id, device_id) DO UPDATE SET secret_sha256 = excluded.secret_sha256
                """, mailbox, device, secretSHA256, cursor)
        }
    }

    public func setAPNs(mailbox: String, device: String, token: String, environment: String) throws {
        try database.transaction { db in
            try db.run("INSERT OR REPLACE INTO mailbox_apns (mailbox_id, device_id, token, environment) VALUES (?, ?, ?, ?)", mailbox, device, token, environment)
        }
    }

    public func apns(mailbox: String, device: String) throws -> (token: String, environment: String)? {
        try database.read { db in
            try db.query("SELECT token, environment FROM mailbox_apns WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first.map {
                ($0.string("token") ?? "", $0.string("environment") ?? "production")
            }
        }
    }

    public func deleteDevice(mailbox: String, device: String) throws {
        try database.transaction { db in
            for table in ["mailbox_devices", "mailbox_items", "mailbox_commands", "mailbox_apns"] {
                try db.run("DELETE FROM \(table) WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
            }
        }
    }

    public func carriageOn(mailbox: String, device: String) -> Bool {
        ((try? database.read { db in try db.query("SELECT carriage_on FROM mailbox_devices WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.bool("carriage_on") }) ?? nil) ?? false
    }

    /// Off deletes everything held for the phone and holds nothing more; on resumes after `cursor`.
    public func setCarriage(mailbox: String, device: String, on: Bool, cursor: Int64?) throws {
        try database.transaction { db in
            try db.run("UPDATE mailbox_devices SET carriage_on = ?, cursor = COALESCE(?, cursor) WHERE mailbox_id = ? AND device_id = ?", on, cursor, mailbox, device)
            if !on {
                try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
                try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
            }
        }
    }

    /// Appends a down item; returns its sequence number (one higher than any before, never reused).
    public enum ItemKind: String, Sendable { case record, result }

    public func appendItem(mailbox: String, device: String, ciphertext: String?, tooLarge: Bool, kind: ItemKind = .record, seq: Int64? = nil) throws -> Int64 {
        try database.transaction { db in
            let last = try db.query("SELECT MAX(n) AS n FROM mailbox_items WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.int("n")
            let cursor = try db.query("SELECT cursor FROM mailbox_devices WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.int("cursor") ?? 0
            let n = max(last ?? 0, cursor) + 1
            try db.run("INSERT INTO mailbox_items (mailbox_id, device_id, n, ciphertext, too_large, kind, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       mailbox, device, n, ciphertext, tooLarge, kind.rawValue, seq)
            return n
        }
    }

    public func items(mailbox: String, device: String, after: Int64, limit: Int = 200) throws -> [(n: Int64, ciphertext: String?, tooLarge: Bool)] {
        try database.read { db in
            try db.query("SELECT n, ciphertext, too_large FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND n > ? ORDER BY n LIMIT ?", mailbox, device, after, limit)
                .map { ($0.int("n") ?? 0, $0.string("ciphertext"), $0.bool("too_large") ?? false) }
        }
    }

    /// A cursor ack: the phone has the gateway's records up to store sequence `seq` (read over another path,
    /// say). Those records go; results are never dropped this way, since only reading one acknowledges it.
    public func ack(mailbox: String, device: String, recordsThroughSeq seq: Int64) throws {
        try database.transaction { db in
            try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND kind = 'record' AND seq IS NOT NULL AND seq <= ?", mailbox, device, seq)
        }
    }

    /// Acknowledged items (by item number) are gone for good; the cursor only moves forward.
    public func ack(mailbox: String, device: String, through: Int64) throws {
        try database.transaction { db in
            try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND n <= ?", mailbox, device, through)
            try db.run("UPDATE mailbox_devices SET cursor = MAX(cursor, ?) WHERE mailbox_id = ? AND device_id = ?", through, mailbox, device)
        }
    }

    /// Holds a command for the gateway; false when a command with this id is already held.
    public func holdCommand(mailbox: String, device: String, id: String, ciphertext: String) throws -> Bool {
        try database.transaction { db in
            try db.run("INSERT OR IGNORE INTO mailbox_commands (mailbox_id, device_id, id, ciphertext, received_at) VALUES (?, ?, ?, ?, ?)",
                       mailbox, device, id, ciphertext, Self.now()) == 1
        }
    }

    public func heldCommands(mailbox: String) throws -> [(device: String, id: String, ciphertext: String)] {
        try database.read { db in
            try db.query("SELECT device_id, id, ciphertext FROM mailbox_commands WHERE mailbox_id = ? ORDER BY received_at, id LIMIT 100", mailbox)
                .map { ($0.string("device_id") ?? "", $0.string("id") ?? "", $0.string("ciphertext") ?? "") }
        }
    }

    /// A held command stays until the gateway reports it applied.
    public func applied(mailbox: String, device: String, id: String) throws {
        try database.transaction { db in try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = ? AND device_id = ? AND id = ?", mailbox, device, id) }
    }
}
