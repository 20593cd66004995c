import ChannelDelivery
import Foundation
import PostgreSQL
import Storage

/// The inbound store on PostgreSQL, shared by every node: a message is taken once whichever node polled it (the
/// primary key decides), and a run id is minted with it, so two nodes starting an unstarted message at start-up start
/// one run. What the service sent (ids, chats, text, the cursor) is BYTEA: PostgreSQL's text cannot hold a NUL that
/// a JSON string can.
public struct PostgresChannelInboundStore: ChannelInboundStore {
    public static let migrations = [
        PostgresMigration(module: "channel-inbound", version: 1, sql: """
            CREATE TABLE channel_cursors (channel TEXT PRIMARY KEY, cursor BYTEA);
            CREATE TABLE channel_inbound (
                channel TEXT NOT NULL,
                message_id BYTEA NOT NULL,
                run_id TEXT NOT NULL,
                reply_to BYTEA NOT NULL,
                text BYTEA NOT NULL,
                received_at BIGINT NOT NULL,
                PRIMARY KEY (channel, message_id)
            );
            """),
        // Which node polls each channel, on a lease from the database's clock.
        PostgresMigration(module: "channel-inbound", version: 2, sql: """
            CREATE TABLE channel_pollers (channel TEXT PRIMARY KEY, node TEXT NOT NULL, lease_until BIGINT NOT NULL);
            """),
    ]

    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func cursor(channel: String) async throws -> String? {
        try await pool.withConnection { db in
            try db.query("SELECT cursor FROM channel_cursors WHERE channel = $1", channel).first?.string("cursor")
        }
    }

    public func take(_ messages: [TakenMessage], channel: String, cursor: String?, now: Date) async throws -> [TakenMessage] {
        try await pool.transaction { db in
            var taken: [TakenMessage] = []
            for message in messages {
                let inserted = try db.run("""
                    INSERT INTO channel_inbound (channel, message_id, run_id, reply_to, text, received_at) VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (channel, message_id) DO NOTHING
                    """, channel, Array(message.messageID.utf8), message.runID, Array(message.replyTo.utf8), Array(message.text.utf8), now.postgresMillis)
                if inserted > 0 { taken.append(message) }
            }
            if let cursor {
                try db.run("""
                    INSERT INTO channel_cursors (channel, cursor) VALUES ($1, $2) ON CONFLICT (channel) DO UPDATE SET cursor = excluded.cursor
                    """, channel, Array(cursor.utf8))
            }
            return taken
        }
    }

    public func holdPoll(channel: String, node: String, lease: Duration) async throws -> Bool {
        let leaseMS = lease.components.seconds * 1000 + lease.components.attoseconds / 1_000_000_000_000_000
        return try await pool.transaction { db in
            // The holder renews; anyone takes a lease that ran out. Racing takers queue on the row's lock, and each
            // re-checks the condition against the winner's row.
            !(try db.query("""
                INSERT INTO channel_pollers (channel, node, lease_until) VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT + $3)
                ON CONFLICT (channel) DO UPDATE SET node = excluded.node, lease_until = excluded.lease_until
                WHERE channel_pollers.node = excluded.node OR channel_pollers.lease_until < (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT
                RETURNING node
                """, channel, node, leaseMS).isEmpty)
        }
    }

    public func unstarted(channel: String) async throws -> [TakenMessage] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT channel, message_id, run_id, reply_to, text FROM channel_inbound i
                WHERE channel = $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = i.run_id) ORDER BY received_at, message_id
                """, channel).map {
                TakenMessage(channel: $0.string("channel") ?? "", messageID: $0.string("message_id") ?? "", runID: $0.string("run_id") ?? "",
                             replyTo: $0.string("reply_to") ?? "", text: $0.string("text") ?? "")
            }
        }
    }
}
