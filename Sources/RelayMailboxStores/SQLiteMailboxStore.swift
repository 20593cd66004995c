import Foundation
import RelayMailbox
import SQLite

/// The relay's mailboxes in one SQLite file: one relay process, its handlers on the file's own threads.
public final class SQLiteMailboxStore: MailboxStore {
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
        // The last number each phone was given. Numbering from the newest item held reused a number once a cursor
        // ack had dropped the newest records, and a phone reading after that number never saw the new item.
        Migration("relay.3-last-item-number", """
            ALTER TABLE mailbox_devices ADD COLUMN last_n INTEGER NOT NULL DEFAULT 0;
            UPDATE mailbox_devices SET last_n = MAX(cursor, COALESCE((SELECT MAX(n) FROM mailbox_items i
                WHERE i.mailbox_id = mailbox_devices.mailbox_id AND i.device_id = mailbox_devices.device_id), 0));
            """),
    ]

    public let database: DatabasePool
    /// Seconds since its last poll within which the gateway counts as online.
    public let onlineWindow: TimeInterval

    /// Opens (and makes) the relay's file at `path`.
    public convenience init(path: String, onlineWindow: TimeInterval = 10) throws {
        let database = try DatabasePool(path: path, readerCount: 2)
        do {
            try self.init(database: database, onlineWindow: onlineWindow)
        } catch {
            database.close()
            throw error
        }
    }

    /// The relay's tables in an open database, migrated.
    public init(database: DatabasePool, onlineWindow: TimeInterval = 10) throws {
        self.database = database
        self.onlineWindow = onlineWindow
        try database.migrate(Self.migrations)
    }

    static func now() -> Int64 { Date().sqliteMillis }

    public func createMailbox(secretSHA256: [UInt8]) async throws -> String {
        let id = MailboxID.make()
        try await database.asyncTransaction { db in try db.run("INSERT INTO mailboxes (id, secret_sha256) VALUES (?, ?)", id, secretSHA256) }
        return id
    }

    public func mailboxSecret(_ id: String) async throws -> [UInt8]? {
        try await database.asyncRead { db in try db.query("SELECT secret_sha256 FROM mailboxes WHERE id = ?", id).first?.blob("secret_sha256") }
    }

    public func deviceSecret(mailbox: String, device: String) async throws -> [UInt8]? {
        try await database.asyncRead { db in
            try db.query("SELECT secret_sha256 FROM mailbox_devices WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.blob("secret_sha256")
        }
    }

    public func touch(mailbox: String) async throws {
        try await database.asyncTransaction { db in try db.run("UPDATE mailboxes SET last_seen = ? WHERE id = ?", Self.now(), mailbox) }
    }

    public func isOnline(mailbox: String) async throws -> Bool {
        let seen = try await database.asyncRead { db in try db.query("SELECT last_seen FROM mailboxes WHERE id = ?", mailbox).first?.int("last_seen") } ?? 0
        return Double(Self.now() - seen) / 1000 < onlineWindow
    }

    public func putDevice(mailbox: String, device: String, secretSHA256: [UInt8], cursor: Int64) async throws {
        try await database.asyncTransaction { db in
            try db.run("""
                INSERT INTO mailbox_devices (mailbox_id, device_id, secret_sha256, cursor, last_n) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (mailbox_id, device_id) DO UPDATE SET secret_sha256 = excluded.secret_sha256
                """, mailbox, device, secretSHA256, cursor, cursor)
        }
    }

    public func deviceCount(mailbox: String, upTo limit: Int) async throws -> Int {
        try await database.asyncRead { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_devices WHERE mailbox_id = ? LIMIT ?)", mailbox, limit).first?.int("n") ?? 0)
        }
    }

    public func setAPNs(mailbox: String, device: String, token: MailboxAPNsToken) async throws {
        try await database.asyncTransaction { db in
            try db.run("INSERT OR REPLACE INTO mailbox_apns (mailbox_id, device_id, token, environment) VALUES (?, ?, ?, ?)",
                       mailbox, device, token.token, token.environment)
        }
    }

    public func apns(mailbox: String, device: String) async throws -> MailboxAPNsToken? {
        try await database.asyncRead { db in
            try db.query("SELECT token, environment FROM mailbox_apns WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first.map {
                MailboxAPNsToken(token: $0.string("token") ?? "", environment: $0.string("environment") ?? "production")
            }
        }
    }

    public func deleteDevice(mailbox: String, device: String) async throws {
        try await database.asyncTransaction { db in
            for table in ["mailbox_devices", "mailbox_items", "mailbox_commands", "mailbox_apns"] {
                try db.run("DELETE FROM \(table) WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
            }
        }
    }

    public func carriageOn(mailbox: String, device: String) async throws -> Bool {
        try await database.asyncRead { db in
            try db.query("SELECT carriage_on FROM mailbox_devices WHERE mailbox_id = ? AND device_id = ?", mailbox, device).first?.bool("carriage_on")
        } ?? false
    }

    public func setCarriage(mailbox: String, device: String, on: Bool, cursor: Int64?) async throws {
        try await database.asyncTransaction { db in
            try db.run("""
                UPDATE mailbox_devices SET carriage_on = ?, cursor = COALESCE(?, cursor), last_n = MAX(last_n, COALESCE(?, cursor))
                WHERE mailbox_id = ? AND device_id = ?
                """, on, cursor, cursor, mailbox, device)
            if !on {
                try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
                try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = ? AND device_id = ?", mailbox, device)
            }
        }
    }

    public func appendItem(mailbox: String, device: String, _ item: NewMailboxItem) async throws -> Int64? {
        try await database.asyncTransaction { db in
            guard let n = try db.query("""
                UPDATE mailbox_devices SET last_n = MAX(last_n, cursor) + 1
                WHERE mailbox_id = ? AND device_id = ? AND carriage_on = 1 RETURNING last_n
                """, mailbox, device).first?.int("last_n") else { return nil }
            try db.run("INSERT INTO mailbox_items (mailbox_id, device_id, n, ciphertext, too_large, kind, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       mailbox, device, n, item.ciphertext, item.tooLarge, item.kind.rawValue, item.seq)
            return n
        }
    }

    public func items(mailbox: String, device: String, after: Int64, limit: Int) async throws -> [MailboxItem] {
        try await database.asyncRead { db in
            try db.query("SELECT n, ciphertext, too_large FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND n > ? ORDER BY n LIMIT ?",
                         mailbox, device, after, limit)
                .map { MailboxItem(n: $0.int("n") ?? 0, ciphertext: $0.string("ciphertext"), tooLarge: $0.bool("too_large") ?? false) }
        }
    }

    public func pendingItems(mailbox: String, device: String, upTo limit: Int) async throws -> Int {
        try await database.asyncRead { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? LIMIT ?)",
                             mailbox, device, limit).first?.int("n") ?? 0)
        }
    }

    public func ack(mailbox: String, device: String, recordsThroughSeq seq: Int64) async throws {
        try await database.asyncTransaction { db in
            try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND kind = 'record' AND seq IS NOT NULL AND seq <= ?",
                       mailbox, device, seq)
        }
    }

    public func ack(mailbox: String, device: String, through: Int64) async throws {
        try await database.asyncTransaction { db in
            try db.run("DELETE FROM mailbox_items WHERE mailbox_id = ? AND device_id = ? AND n <= ?", mailbox, device, through)
            try db.run("UPDATE mailbox_devices SET cursor = MAX(cursor, ?) WHERE mailbox_id = ? AND device_id = ?", through, mailbox, device)
        }
    }

    public func holdCommand(mailbox: String, device: String, id: String, ciphertext: String) async throws -> Bool {
        try await database.asyncTransaction { db in
            try db.run("INSERT OR IGNORE INTO mailbox_commands (mailbox_id, device_id, id, ciphertext, received_at) VALUES (?, ?, ?, ?, ?)",
                       mailbox, device, id, ciphertext, Self.now()) == 1
        }
    }

    public func heldCommandCount(mailbox: String, device: String, upTo limit: Int) async throws -> Int {
        try await database.asyncRead { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_commands WHERE mailbox_id = ? AND device_id = ? LIMIT ?)",
                             mailbox, device, limit).first?.int("n") ?? 0)
        }
    }

    public func heldCommands(mailbox: String) async throws -> [HeldMailboxCommand] {
        try await database.asyncRead { db in
            try db.query("SELECT device_id, id, ciphertext FROM mailbox_commands WHERE mailbox_id = ? ORDER BY received_at, id LIMIT 100", mailbox)
                .map { HeldMailboxCommand(device: $0.string("device_id") ?? "", id: $0.string("id") ?? "", ciphertext: $0.string("ciphertext") ?? "") }
        }
    }

    public func applied(mailbox: String, device: String, id: String) async throws {
        try await database.asyncTransaction { db in
            try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = ? AND device_id = ? AND id = ?", mailbox, device, id)
        }
    }

    public func checkReadable() async throws { try await database.checkReadable() }

    public func close() { database.close() }
}
