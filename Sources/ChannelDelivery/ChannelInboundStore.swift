import Foundation
import SQLite

/// What the inbound side keeps durably: each poller's cursor, and every message taken with the run it starts, so a
/// restart neither loses a message (its run is started at start-up if it never was) nor repeats one (a message
/// already taken is skipped, whatever the service sends again).
public struct ChannelInboundStore: Sendable {
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

    /// A message taken for a run.
    public struct Taken: Sendable, Equatable {
        public var channel: String
        public var messageID: String
        public var runID: String
        public var replyTo: String
        public var text: String
    }

    public let database: DatabasePool

    public init(database: DatabasePool) { self.database = database }

    public func cursor(channel: String) throws -> String? {
        try database.read { db in try db.query("SELECT cursor FROM channel_cursors WHERE channel = ?", channel).first?.string("cursor") }
    }

    /// Takes the messages not seen before and moves the cursor past the batch, in one transaction; returns the new ones.
    public func take(_ messages: [(id: String, replyTo: String, text: String)], channel: String, cursor: String?, runID: () -> String,
                     now: Date) throws -> [Taken] {
        try database.transaction { db in
            var taken: [Taken] = []
            for message in messages {
                let run = runID()
                let inserted = try db.run("""
                    INSERT OR IGNORE INTO channel_inbound (channel, message_id, run_id, reply_to, text, received_at) VALUES (?, ?, ?, ?, ?, ?)
                    """, channel, message.id, run, message.replyTo, message.text, now.sqliteMillis)
                if inserted > 0 { taken.append(Taken(channel: channel, messageID: message.id, runID: run, replyTo: message.replyTo, text: message.text)) }
            }
            if let cursor {
                try db.run("INSERT INTO channel_cursors (channel, cursor) VALUES (?, ?) ON CONFLICT (channel) DO UPDATE SET cursor = excluded.cursor", channel, cursor)
            }
            return taken
        }
    }

    /// Messages taken whose run was never recorded (the process died between taking and starting them).
    public func unstarted(channel: String) throws -> [Taken] {
        try database.read { db in
            try db.query("""
                SELECT channel, message_id, run_id, reply_to, text FROM channel_inbound i
                WHERE channel = ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = i.run_id) ORDER BY received_at, message_id
                """, channel).map {
                Taken(channel: $0.string("channel") ?? "", messageID: $0.string("message_id") ?? "", runID: $0.string("run_id") ?? "",
                      replyTo: $0.string("reply_to") ?? "", text: $0.string("text") ?? "")
            }
        }
    }
}
