import ChannelAPI
import Foundation
import PostgreSQL

/// The endpoints channels disabled, on PostgreSQL (`channel_endpoints`, the same rows as SQLite's), shared by every
/// node on the database: a webhook endpoint that answered 410 Gone stays disabled across restarts and on every node,
/// until its config entry changes. Rows hold the channel's key, a fingerprint (a hash) and a display name, never a
/// secret. A disable is one upsert, so concurrent disables of one endpoint leave one row.
public struct PostgresEndpointStateStore: EndpointStateStore {
    public static let migrations = [
        PostgresMigration(module: "channel-endpoints", version: 1, sql: """
            CREATE TABLE channel_endpoints (
                channel TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                display TEXT NOT NULL,
                reason TEXT NOT NULL,
                since BIGINT NOT NULL,
                PRIMARY KEY (channel, endpoint)
            );
            """),
    ]

    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    private static func record(_ row: PostgresRow) -> DisabledEndpoint? {
        guard let channel = row.string("channel"), let endpoint = row.string("endpoint"), let since = row.int("since") else { return nil }
        return DisabledEndpoint(channel: channel, endpoint: endpoint, fingerprint: row.string("fingerprint") ?? "",
                                display: row.string("display") ?? endpoint, reason: row.string("reason") ?? "",
                                since: Date(postgresMillis: since))
    }

    public func disabled(channel: String, endpoint: String) async throws -> DisabledEndpoint? {
        try await pool.withConnection { db in
            try db.query("SELECT * FROM channel_endpoints WHERE channel = $1 AND endpoint = $2", channel, endpoint).first.flatMap(Self.record)
        }
    }

    public func disabled(channel: String) async throws -> [DisabledEndpoint] {
        // Oldest first, ties by endpoint in byte order (`COLLATE "C"`), as SQLite's binary collation orders them:
        // the database's own collation would order the same names another way.
        try await pool.withConnection { db in
            try db.query("SELECT * FROM channel_endpoints WHERE channel = $1 ORDER BY since, endpoint COLLATE \"C\"", channel).compactMap(Self.record)
        }
    }

    public func disable(_ record: DisabledEndpoint) async throws {
        _ = try await pool.transaction { db in
            try db.run("""
                INSERT INTO channel_endpoints (channel, endpoint, fingerprint, display, reason, since) VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (channel, endpoint) DO UPDATE SET fingerprint = excluded.fingerprint, display = excluded.display,
                                                             reason = excluded.reason, since = excluded.since
                """, record.channel, record.endpoint, record.fingerprint, record.display, record.reason, record.since.postgresMillis)
        }
    }

    public func enable(channel: String, endpoint: String) async throws {
        _ = try await pool.transaction { db in
            try db.run("DELETE FROM channel_endpoints WHERE channel = $1 AND endpoint = $2", channel, endpoint)
        }
    }
}
