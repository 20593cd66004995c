import Foundation
import SQLite

/// How the push outbox stands, for the console's health page: what waits, since when, and how each transport's
/// latest finished wake-up went.
public struct PushOutboxHealth: Sendable, Equatable {
    public struct LastOutcome: Sendable, Equatable {
        public var state: String
        public var outcome: String?
            public var at: Date

        public init(state: String, outcome: String?, at: Date) {
            self.state = state
            self.outcome = outcome
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

extension PushOutboxHealth {
    /// Only the newest wake-ups are looked at for each transport's last outcome: the table can hold a backlog of a
    /// million rows, and a health page must not walk it (an index for this alone would cost every write).
    public static let window: Int64 = 5_000
}

extension SQLitePushOutbox {
    public func health(transports: [String]) async throws -> PushOutboxHealth {
        try await database.asyncRead { db in
            let pending = try db.query("SELECT count(*) AS n, min(created_at) AS oldest FROM mobile_push_outbox WHERE state = 'pending'").first
            var last: [String: PushOutboxHealth.LastOutcome] = [:]
            for transport in transports {
                let row = try db.query("""
                    SELECT state, outcome, finished_at FROM mobile_push_outbox
                    WHERE id > (SELECT coalesce(max(id), 0) - ? FROM mobile_push_outbox) AND transport = ? AND finished_at IS NOT NULL
                    ORDER BY finished_at DESC LIMIT 1
                    """, PushOutboxHealth.window, transport).first
                if let row, let at = row.int("finished_at") {
                    last[transport] = .init(state: row.string("state") ?? "", outcome: row.string("outcome"), at: Date(sqliteMillis: at))
                }
            }
            return PushOutboxHealth(pending: Int(pending?.int("n") ?? 0), oldestPendingAt: pending?.int("oldest").map(Date.init(sqliteMillis:)),
                                    lastOutcomes: last)
        }
    }
}
