import Foundation
import SQLite

/// How the channel hand-off stands, for the console's health page: what waits, since when, and each channel's
/// latest finished send.
public struct ChannelOutboxHealth: Sendable, Equatable {
    public struct LastOutcome: Sendable, Equatable {
        public var state: String
        public var reason: String?
        public var at: Date

        public init(state: String, reason: String?, at: Date) {
            self.state = state
            self.reason = reason
            self.at = at
        }
    }
    public var pending: Int
    public var oldestPendingAt: Date?
    public var lastOutcomes: [String: LastOutcome]

    public init(pending: Int, oldestPendingAt: Date?, lastOutcomes: [String: LastOutcome]) {
        self.pending = pending
        self.oldestPendingAt = oldestPendingAt
        self.lastOutcomes = lastOutcomes
    }
}

extension SQLiteChannelOutbox {
    public func health(channels: [String]) async throws -> ChannelOutboxHealth {
        try await database.asyncRead { db in
            let pending = try db.query("SELECT count(*) AS n, min(created_at) AS oldest FROM channel_outbox WHERE state = 'pending'").first
            var last: [String: ChannelOutboxHealth.LastOutcome] = [:]
            for channel in channels {
                // Ids are time-ordered, so the newest rows come first without an index of their own.
                let row = try db.query("""
                    SELECT state, last_reason, finished_at FROM channel_outbox WHERE channel = ? AND finished_at IS NOT NULL
                    ORDER BY id DESC LIMIT 1
                    """, channel).first
                if let row, let at = row.int("finished_at") {
                    last[channel] = .init(state: row.string("state") ?? "", reason: row.string("last_reason"), at: Date(sqliteMillis: at))
                }
            }
            return ChannelOutboxHealth(pending: Int(pending?.int("n") ?? 0), oldestPendingAt: pending?.int("oldest").map(Date.init(sqliteMillis:)),
                                       lastOutcomes: last)
        }
    }
}
