import ChannelAPI
import ChannelDelivery
import Foundation
import JSON
import PostgreSQL
import Storage

/// The channel outbox on PostgreSQL, shared by every node: sends recorded with the run's end, claimed in one
/// statement with `FOR UPDATE SKIP LOCKED` and a lease from the database's clock, settled only under the claim that
/// took them. Destinations are sealed at rest as in SQLite (`DestinationSeal`), with the key every node shares.
public struct PostgresChannelOutbox: ChannelOutbox {
    public static let migrations = [
        PostgresMigration(module: "channels", version: 1, sql: """
            CREATE TABLE channel_outbox (
                id TEXT PRIMARY KEY,
                run_id TEXT,
                subject TEXT NOT NULL,
                channel TEXT NOT NULL,
                destination TEXT NOT NULL,
                output TEXT NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending',
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                lease_owner TEXT,
                lease_until BIGINT,
                claims BIGINT NOT NULL DEFAULT 0,
                last_reason TEXT,
                remote_id TEXT,
                delivered_at BIGINT,
                finished_at BIGINT,
                created_at BIGINT NOT NULL
            );
            CREATE INDEX channel_outbox_due ON channel_outbox (next_attempt_at, id) WHERE state = 'pending';
            CREATE INDEX channel_outbox_run ON channel_outbox (run_id);
            CREATE INDEX channel_outbox_finished ON channel_outbox (channel, finished_at) WHERE finished_at IS NOT NULL;
            """),
    ]

    let pool: PostgresPool
    /// Seals each row's destination (the gateway always passes one); nil keeps destinations in the clear.
    let destinationSeal: DestinationSeal?

    public init(pool: PostgresPool, destinationSeal: DestinationSeal? = nil) {
        self.pool = pool
        self.destinationSeal = destinationSeal
    }

    private func insert(_ sends: [PendingChannelSend], runID: String?, now: Date, in db: PostgresConnection) throws {
        for send in sends {
            let output = StoredOutput.text(send.output)
            let destination = try destinationSeal?.seal(send.destination) ?? send.destination
            try db.run("""
                INSERT INTO channel_outbox (id, run_id, subject, channel, destination, output, next_attempt_at, expires_at, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                """, send.id, runID, send.subject, send.channel, destination, output, now.postgresMillis,
                       now.addingTimeInterval(ChannelOutboxEntry.defaultLifetime).postgresMillis, now.postgresMillis)
        }
    }

    public func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date, in session: any StorageSession) throws {
        try insert(sends, runID: runID, now: now, in: session.postgresConnection())
    }

    public func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date) async throws {
        try await pool.transaction { db in try insert(sends, runID: runID, now: now, in: db) }
    }

    /// A row as the lane sees it: its destination opened, or `DestinationSeal.unreadable` under another key.
    private func entry(_ row: PostgresRow) -> ChannelOutboxEntry? {
        guard let id = row.string("id"), let text = row.string("output"), let output = StoredOutput.output(from: text) else { return nil }
        let stored = row.string("destination") ?? ""
        let destination = destinationSeal.map { (try? $0.open(stored)) ?? DestinationSeal.unreadable } ?? stored
        return ChannelOutboxEntry(id: id, runID: row.string("run_id"), subject: row.string("subject") ?? "", channel: row.string("channel") ?? "",
                                  destination: destination, output: output,
                                  state: ChannelOutboxEntry.State(rawValue: row.string("state") ?? "") ?? .pending,
                                  attempts: Int(row.int("attempts") ?? 0), nextAttemptAt: Date(postgresMillis: row.int("next_attempt_at") ?? 0),
                                  expiresAt: Date(postgresMillis: row.int("expires_at") ?? 0), lastReason: row.string("last_reason"),
                                  remoteID: row.string("remote_id"), deliveredAt: row.int("delivered_at").map { Date(postgresMillis: $0) },
                                  createdAt: Date(postgresMillis: row.int("created_at") ?? 0), claim: row.int("claims") ?? 0)
    }

    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [ChannelOutboxEntry] {
        try await pool.transaction { db in
            try db.query(PostgresOutboxClaims.claim("channel_outbox"), now.postgresMillis, limit, owner, Int64(lease * 1000))
        }.compactMap(entry).sorted { $0.id < $1.id }
    }

    public func nextDue() async throws -> Date? {
        try await pool.withConnection { db in
            try db.query("SELECT MIN(next_attempt_at) AS t FROM channel_outbox WHERE state = 'pending'").first?.int("t").map { Date(postgresMillis: $0) }
        }
    }

    @discardableResult
    public func settle(_ id: String, claim: Int64, owner: String, state: ChannelOutboxEntry.State, reason: String?, remoteID: String?,
                       at now: Date) async throws -> Bool {
        try await pool.transaction { db in
            try db.run("""
                UPDATE channel_outbox SET state = $1, last_reason = COALESCE($2, last_reason), remote_id = $3, attempts = attempts + 1,
                                          delivered_at = $4, finished_at = $5, lease_owner = NULL, lease_until = NULL
                WHERE id = $6 AND claims = $7 AND lease_owner = $8 AND state = 'pending'
                """, state.rawValue, reason, remoteID, state == .delivered ? now.postgresMillis : nil, now.postgresMillis, id, claim, owner) > 0
        }
    }

    @discardableResult
    public func reschedule(_ id: String, claim: Int64, owner: String, at next: Date, reason: String) async throws -> Bool {
        try await pool.transaction { db in
            try db.run("""
                UPDATE channel_outbox SET next_attempt_at = $1, last_reason = $2, attempts = attempts + 1, lease_owner = NULL, lease_until = NULL
                WHERE id = $3 AND claims = $4 AND lease_owner = $5 AND state = 'pending'
                """, next.postgresMillis, reason, id, claim, owner) > 0
        }
    }

    public func releaseAbandonedLeases(ownOwner: String) async throws -> Int {
        try await pool.transaction { db in try PostgresOutboxClaims.releaseAbandoned("channel_outbox", ownOwner: ownOwner, in: db) }
    }

    public func entries(runID: String) async throws -> [ChannelOutboxEntry] {
        try await pool.withConnection { db in try db.query("SELECT * FROM channel_outbox WHERE run_id = $1 ORDER BY id", runID).compactMap(entry) }
    }

    public func entries() async throws -> [ChannelOutboxEntry] {
        try await pool.withConnection { db in try db.query("SELECT * FROM channel_outbox ORDER BY id").compactMap(entry) }
    }

    public func entry(id: String) async throws -> ChannelOutboxEntry? {
        try await pool.withConnection { db in try db.query("SELECT * FROM channel_outbox WHERE id = $1", id).first.flatMap(entry) }
    }

    public func removeFinished(before cutoff: Date) async throws -> Int {
        try await PostgresOutboxClaims.removeFinished("channel_outbox", before: cutoff, pool: pool)
    }

    public func health(channels: [String]) async throws -> ChannelOutboxHealth {
        try await pool.withConnection { db in
            let pending = try db.query("SELECT count(*) AS n, min(created_at) AS oldest FROM channel_outbox WHERE state = 'pending'").first
            var last: [String: ChannelOutboxHealth.LastOutcome] = [:]
            for channel in channels {
                let row = try db.query("""
                    SELECT state, last_reason, finished_at FROM channel_outbox WHERE channel = $1 AND finished_at IS NOT NULL
                    ORDER BY finished_at DESC, id DESC LIMIT 1
                    """, channel).first
                if let row, let at = row.int("finished_at") {
                    last[channel] = .init(state: row.string("state") ?? "", reason: row.string("last_reason"), at: Date(postgresMillis: at))
                }
            }
            return ChannelOutboxHealth(pending: Int(pending?.int("n") ?? 0), oldestPendingAt: pending?.int("oldest").map { Date(postgresMillis: $0) },
                                       lastOutcomes: last)
        }
    }
}
