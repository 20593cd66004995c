import Foundation
import SQLite

/// A message a person sent to an agent's bot, taken for the run it starts.
public struct TakenMessage: Sendable, Equatable {
    public var channel: String
    /// The service's id of the message: a message taken once is never taken again.
    public var messageID: String
    /// The run it starts, minted when it is taken, so a run started twice (by two nodes at start-up) is one run.
    public var runID: String
    public var replyTo: String
    public var text: String

    public init(channel: String, messageID: String, runID: String, replyTo: String, text: String) {
        self.channel = channel
        self.messageID = messageID
        self.runID = runID
        self.replyTo = replyTo
        self.text = text
    }
}

/// What the inbound side keeps durably: each poller's cursor, and every message taken with the run it starts, so a
/// restart neither loses a message (its run is started at start-up if it never was) nor repeats one (a message
/// already taken is skipped, whatever the service sends again). One protocol for every engine
/// (`SQLiteChannelInboundStore`, `PostgresChannelInboundStore`); `ChannelInboundConformance` holds both to it.
public protocol ChannelInboundStore: Sendable {
    /// Where the channel's next poll starts (nil: from the service's own start).
    func cursor(channel: String) async throws -> String?
    /// Takes the messages not taken before and moves the cursor past the batch, in one transaction; returns the new
    /// ones in the batch's order. Each carries the run id it will start.
    func take(_ messages: [TakenMessage], channel: String, cursor: String?, now: Date) async throws -> [TakenMessage]
    /// Messages taken whose run was never recorded (the process died between taking and starting them), oldest first.
    func unstarted(channel: String) async throws -> [TakenMessage]
    /// Whether `node` may poll `channel` now: it renews the channel's poll lease, or takes it once it ran out. Of several
    /// gateways on one database one polls each channel at a time (a bot's long poll from two places at once is
    /// refused by Telegram); a dead poller costs the lease.
    func holdPoll(channel: String, node: String, lease: Duration) async throws -> Bool
}

/// The inbound store in the gateway's SQLite file.
public struct SQLiteChannelInboundStore: ChannelInboundStore {
    public static let migrations: [Migration] = [
        Migration("channels.2-inbound", """
            CREATE TABLE channel_cursors (channel TEXT PRIMARY KEY, cursor TEXT);
            CREATE TABLE channel_inbound (
                channel TEXT NOT NULL,
                message_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                reply_to TEXT NOT NULL,
                text TEXT NOT NULL,
                received_at INTEGER NOT NULL,
                PRIMARY KEY (channel, message_id)
            );
            """),
    ]

    public let database: DatabasePool

    public init(database: DatabasePool) { self.database = database }

    public func cursor(channel: String) async throws -> String? {
        try await database.asyncRead { db in try db.query("SELECT cursor FROM channel_cursors WHERE channel = ?", channel).first?.string("cursor") }
    }

    public func take(_ messages: [TakenMessage], channel: String, cursor: String?, now: Date) async throws -> [TakenMessage] {
        try await database.asyncTransaction { db in
            var taken: [TakenMessage] = []
            for message in messages {
                let inserted = try db.run("""
                    INSERT OR IGNORE INTO channel_inbound (channel, message_id, run_id, reply_to, text, received_at) VALUES (?, ?, ?, ?, ?, ?)
                    """, channel, message.messageID, message.runID, message.replyTo, message.text, now.sqliteMillis)
                if inserted > 0 { taken.append(message) }
            }
            if let cursor {
                try db.run("INSERT INTO channel_cursors (channel, cursor) VALUES (?, ?) ON CONFLICT (channel) DO UPDATE SET cursor = excluded.cursor", channel, cursor)
            }
            return taken
        }
    }

    /// One process holds a SQLite file: it always polls.
    public func holdPoll(channel: String, node: String, lease: Duration) async throws -> Bool { true }

    public func unstarted(channel: String) async throws -> [TakenMessage] {
        try await database.asyncRead { db in
            try db.query("""
                SELECT channel, message_id, run_id, reply_to, text FROM channel_inbound i
                WHERE channel = ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = i.run_id) ORDER BY received_at, message_id
                """, channel).map {
                TakenMessage(channel: $0.string("channel") ?? "", messageID: $0.string("message_id") ?? "", runID: $0.string("run_id") ?? "",
                             replyTo: $0.string("reply_to") ?? "", text: $0.string("text") ?? "")
            }
        }
    }
}
