import Foundation
import PostgreSQL
import RelayMailbox

/// The relay's mailboxes on PostgreSQL, shared by several relay processes behind one address: whichever process a
/// gateway or a phone reaches reads and writes the same rows, and the rules that span processes are the database's
/// (an item's number is the phone's row counter under its row lock; a command is held once by its primary key; the
/// gateway's last poll is on the database's clock). Everything a client names (mailbox, phone and command ids, the
/// sealed text) is BYTEA: PostgreSQL's text cannot hold a NUL that a JSON string or a decoded path can.
public struct PostgresMailboxStore: MailboxStore {
    public static let migrations = [
        PostgresMigration(module: "relay-mailbox", version: 1, sql: """
            CREATE TABLE mailboxes (id BYTEA PRIMARY KEY, secret_sha256 BYTEA NOT NULL, last_seen BIGINT NOT NULL DEFAULT 0);
            CREATE TABLE mailbox_devices (
                mailbox_id BYTEA NOT NULL, device_id BYTEA NOT NULL, secret_sha256 BYTEA NOT NULL,
                carriage_on BOOLEAN NOT NULL DEFAULT TRUE, cursor BIGINT NOT NULL DEFAULT 0, last_n BIGINT NOT NULL DEFAULT 0,
                PRIMARY KEY (mailbox_id, device_id)
            );
            CREATE TABLE mailbox_items (
                mailbox_id BYTEA NOT NULL, device_id BYTEA NOT NULL, n BIGINT NOT NULL,
                ciphertext BYTEA, too_large BOOLEAN NOT NULL DEFAULT FALSE, kind TEXT NOT NULL DEFAULT 'record', seq BIGINT,
                PRIMARY KEY (mailbox_id, device_id, n)
            );
            CREATE TABLE mailbox_apns (
                mailbox_id BYTEA NOT NULL, device_id BYTEA NOT NULL, token TEXT NOT NULL, environment TEXT NOT NULL,
                PRIMARY KEY (mailbox_id, device_id)
            );
            CREATE TABLE mailbox_commands (
                mailbox_id BYTEA NOT NULL, device_id BYTEA NOT NULL, id BYTEA NOT NULL, ciphertext BYTEA NOT NULL, received_at BIGINT NOT NULL,
                PRIMARY KEY (mailbox_id, device_id, id)
            );
            CREATE INDEX mailbox_commands_by_age ON mailbox_commands (mailbox_id, received_at, id);
            """),
    ]

    let pool: PostgresPool
    /// Seconds since its last poll within which the gateway counts as online.
    public let onlineWindow: TimeInterval

    public init(pool: PostgresPool, onlineWindow: TimeInterval = 10) {
        self.pool = pool
        self.onlineWindow = onlineWindow
    }

    /// Opens a pool on `url` and applies the relay's migrations once, under the migrator's lock (several relays
    /// starting together migrate once). The pool is closed again when that fails.
    public static func open(url: String, poolSize: Int, onlineWindow: TimeInterval = 10) async throws -> PostgresMailboxStore {
        let pool = try PostgresPool(url: url, size: poolSize, applicationName: "soulacy-relay")
        do {
            _ = try await PostgresMigrator(migrations).migrate(pool)
        } catch {
            pool.close()
            throw error
        }
        return PostgresMailboxStore(pool: pool, onlineWindow: onlineWindow)
    }

    /// The database's clock in milliseconds: every relay process compares against the same one.
    static let now = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT"

    public func createMailbox(secretSHA256: [UInt8]) async throws -> String {
        let id = MailboxID.make()
        try await pool.transaction { db in _ = try db.run("INSERT INTO mailboxes (id, secret_sha256) VALUES ($1, $2)", bytes(id), secretSHA256) }
        return id
    }

    public func mailboxSecret(_ id: String) async throws -> [UInt8]? {
        try await pool.withConnection { db in try db.query("SELECT secret_sha256 FROM mailboxes WHERE id = $1", bytes(id)).first?.bytes("secret_sha256") }
    }

    public func deviceSecret(mailbox: String, device: String) async throws -> [UInt8]? {
        try await pool.withConnection { db in
            try db.query("SELECT secret_sha256 FROM mailbox_devices WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device))
                .first?.bytes("secret_sha256")
        }
    }

    public func touch(mailbox: String) async throws {
        try await pool.withConnection { db in _ = try db.run("UPDATE mailboxes SET last_seen = \(Self.now) WHERE id = $1", bytes(mailbox)) }
    }

    public func isOnline(mailbox: String) async throws -> Bool {
        let windowMS = Int64(onlineWindow * 1000)
        return try await pool.withConnection { db in
            try db.query("SELECT last_seen > \(Self.now) - $2 AS online FROM mailboxes WHERE id = $1", bytes(mailbox), windowMS).first?.bool("online")
        } ?? false
    }

    public func putDevice(mailbox: String, device: String, secretSHA256: [UInt8], cursor: Int64) async throws {
        try await pool.withConnection { db in
            _ = try db.run("""
                INSERT INTO mailbox_devices (mailbox_id, device_id, secret_sha256, cursor, last_n) VALUES ($1, $2, $3, $4, $4)
                ON CONFLICT (mailbox_id, device_id) DO UPDATE SET secret_sha256 = excluded.secret_sha256
                """, bytes(mailbox), bytes(device), secretSHA256, cursor)
        }
    }

    public func deviceCount(mailbox: String, upTo limit: Int) async throws -> Int {
        try await pool.withConnection { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_devices WHERE mailbox_id = $1 LIMIT $2) AS phones",
                             bytes(mailbox), limit).first?.int("n") ?? 0)
        }
    }

    public func setAPNs(mailbox: String, device: String, token: MailboxAPNsToken) async throws {
        try await pool.withConnection { db in
            _ = try db.run("""
                INSERT INTO mailbox_apns (mailbox_id, device_id, token, environment) VALUES ($1, $2, $3, $4)
                ON CONFLICT (mailbox_id, device_id) DO UPDATE SET token = excluded.token, environment = excluded.environment
                """, bytes(mailbox), bytes(device), token.token, token.environment)
        }
    }

    public func apns(mailbox: String, device: String) async throws -> MailboxAPNsToken? {
        try await pool.withConnection { db in
            try db.query("SELECT token, environment FROM mailbox_apns WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device)).first.map {
                MailboxAPNsToken(token: $0.string("token") ?? "", environment: $0.string("environment") ?? "production")
            }
        }
    }

    public func deleteDevice(mailbox: String, device: String) async throws {
        try await pool.transaction { db in
            for table in ["mailbox_devices", "mailbox_items", "mailbox_commands", "mailbox_apns"] {
                _ = try db.run("DELETE FROM \(table) WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device))
            }
        }
    }

    public func carriageOn(mailbox: String, device: String) async throws -> Bool {
        try await pool.withConnection { db in
            try db.query("SELECT carriage_on FROM mailbox_devices WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device))
                .first?.bool("carriage_on")
        } ?? false
    }

    public func setCarriage(mailbox: String, device: String, on: Bool, cursor: Int64?) async throws {
        try await pool.transaction { db in
            _ = try db.run("""
                UPDATE mailbox_devices SET carriage_on = $3, cursor = COALESCE($4, cursor), last_n = GREATEST(last_n, COALESCE($4, cursor))
                WHERE mailbox_id = $1 AND device_id = $2
                """, bytes(mailbox), bytes(device), on, cursor)
            if !on {
                _ = try db.run("DELETE FROM mailbox_items WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device))
                _ = try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = $1 AND device_id = $2", bytes(mailbox), bytes(device))
            }
        }
    }

    public func pendingItems(mailbox: String, device: String, upTo limit: Int) async throws -> Int {
        try await pool.withConnection { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_items WHERE mailbox_id = $1 AND device_id = $2 LIMIT $3) AS pending",
                             bytes(mailbox), bytes(device), limit).first?.int("n") ?? 0)
        }
    }

    public func appendItem(mailbox: String, device: String, _ item: NewMailboxItem) async throws -> Int64? {
        try await pool.transaction { db in
            // The phone's row is locked until commit: two relays appending at once number one after the other.
            guard let n = try db.query("""
                UPDATE mailbox_devices SET last_n = GREATEST(last_n, cursor) + 1
                WHERE mailbox_id = $1 AND device_id = $2 AND carriage_on RETURNING last_n
                """, bytes(mailbox), bytes(device)).first?.int("last_n") else { return nil }
            _ = try db.run("""
                INSERT INTO mailbox_items (mailbox_id, device_id, n, ciphertext, too_large, kind, seq) VALUES ($1, $2, $3, $4, $5, $6, $7)
                """, bytes(mailbox), bytes(device), n, item.ciphertext.map(bytes), item.tooLarge, item.kind.rawValue, item.seq)
            return n
        }
    }

    public func items(mailbox: String, device: String, after: Int64, limit: Int) async throws -> [MailboxItem] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT n, ciphertext, too_large FROM mailbox_items WHERE mailbox_id = $1 AND device_id = $2 AND n > $3 ORDER BY n LIMIT $4
                """, bytes(mailbox), bytes(device), after, limit)
                .map { MailboxItem(n: $0.int("n") ?? 0, ciphertext: $0.string("ciphertext"), tooLarge: $0.bool("too_large") ?? false) }
        }
    }

    public func ack(mailbox: String, device: String, recordsThroughSeq seq: Int64) async throws {
        try await pool.withConnection { db in
            _ = try db.run("""
                DELETE FROM mailbox_items WHERE mailbox_id = $1 AND device_id = $2 AND kind = 'record' AND seq IS NOT NULL AND seq <= $3
                """, bytes(mailbox), bytes(device), seq)
        }
    }

    public func ack(mailbox: String, device: String, through: Int64) async throws {
        try await pool.transaction { db in
            _ = try db.run("DELETE FROM mailbox_items WHERE mailbox_id = $1 AND device_id = $2 AND n <= $3", bytes(mailbox), bytes(device), through)
            _ = try db.run("UPDATE mailbox_devices SET cursor = GREATEST(cursor, $3) WHERE mailbox_id = $1 AND device_id = $2",
                           bytes(mailbox), bytes(device), through)
        }
    }

    public func heldCommandCount(mailbox: String, device: String, upTo limit: Int) async throws -> Int {
        try await pool.withConnection { db in
            Int(try db.query("SELECT COUNT(*) AS n FROM (SELECT 1 FROM mailbox_commands WHERE mailbox_id = $1 AND device_id = $2 LIMIT $3) AS held",
                             bytes(mailbox), bytes(device), limit).first?.int("n") ?? 0)
        }
    }

    public func holdCommand(mailbox: String, device: String, id: String, ciphertext: String) async throws -> Bool {
        try await pool.withConnection { db in
            try db.run("""
                INSERT INTO mailbox_commands (mailbox_id, device_id, id, ciphertext, received_at) VALUES ($1, $2, $3, $4, \(Self.now))
                ON CONFLICT (mailbox_id, device_id, id) DO NOTHING
                """, bytes(mailbox), bytes(device), bytes(id), bytes(ciphertext)) == 1
        }
    }

    public func heldCommands(mailbox: String) async throws -> [HeldMailboxCommand] {
        try await pool.withConnection { db in
            try db.query("SELECT device_id, id, ciphertext FROM mailbox_commands WHERE mailbox_id = $1 ORDER BY received_at, id LIMIT 100", bytes(mailbox))
                .map { HeldMailboxCommand(device: $0.string("device_id") ?? "", id: $0.string("id") ?? "", ciphertext: $0.string("ciphertext") ?? "") }
        }
    }

    public func applied(mailbox: String, device: String, id: String) async throws {
        try await pool.withConnection { db in
            _ = try db.run("DELETE FROM mailbox_commands WHERE mailbox_id = $1 AND device_id = $2 AND id = $3", bytes(mailbox), bytes(device), bytes(id))
        }
    }

    public func checkReadable() async throws { try await pool.checkReadable() }

    public func close() { pool.close() }
}

/// A client's text as BYTEA.
private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
