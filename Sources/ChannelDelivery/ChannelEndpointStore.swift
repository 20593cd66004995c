import ChannelAPI
import Foundation
import SQLite

/// The endpoints channels disabled, in the gateway's database (`channel_endpoints`, created with the outbox's
/// migrations): what the channel lane hands every attempt, so a restart keeps a webhook endpoint that answered
/// 410 Gone disabled. Rows hold the channel's key, a fingerprint (a hash) and a display name, never a secret.
public struct SQLiteEndpointStateStore: EndpointStateStore {
    public let database: DatabasePool

    public init(database: DatabasePool) { self.database = database }

    private static func record(_ row: Row) -> DisabledEndpoint? {
        guard let channel = row.string("channel"), let endpoint = row.string("endpoint"), let since = row.date("since") else { return nil }
        return DisabledEndpoint(channel: channel, endpoint: endpoint, fingerprint: row.string("fingerprint") ?? "",
                                display: row.string("display") ?? endpoint, reason: row.string("reason") ?? "", since: since)
    }

    public func disabled(channel: String, endpoint: String) async throws -> DisabledEndpoint? {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM channel_endpoints WHERE channel = ? AND endpoint = ?", channel, endpoint).first.flatMap(Self.record)
        }
    }

    public func disabled(channel: String) async throws -> [DisabledEndpoint] {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM channel_endpoints WHERE channel = ? ORDER BY since, endpoint", channel).compactMap(Self.record)
        }
    }

    public func disable(_ record: DisabledEndpoint) async throws {
        _ = try await database.asyncWrite { db in
            try db.run("""
                INSERT INTO channel_endpoints (channel, endpoint, fingerprint, display, reason, since) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (channel, endpoint) DO UPDATE SET fingerprint = excluded.fingerprint, display = excluded.display,
                                                             reason = excluded.reason, since = excluded.since
                """, record.channel, record.endpoint, record.fingerprint, record.display, record.reason, record.since.sqliteMillis)
        }
    }

    public func enable(channel: String, endpoint: String) async throws {
        _ = try await database.asyncWrite { db in
            try db.run("DELETE FROM channel_endpoints WHERE channel = ? AND endpoint = ?", channel, endpoint)
        }
    }
}
