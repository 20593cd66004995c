import ChannelAPI
import Crypto
import Foundation
import Mobile
import PostgreSQL
import Storage

/// The push outbox on PostgreSQL, shared by every node of a gateway: rows are written in the transaction of what
/// they wake for, claimed in one statement with `FOR UPDATE SKIP LOCKED` and a lease from the database's clock, and
/// settled only under the claim that took them (a row re-claimed after its lease ran out is never settled by its old
/// holder). The send itself never runs inside a transaction.
public struct PostgresPushOutbox: PushOutbox {
    /// How long a wake-up stays worth sending; after that it is recorded as expired.
    public static let defaultLifetime: TimeInterval = 24 * 3600

    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func enqueue(_ signal: WakeSignal, deliveryID: String?, deviceIDs: [String], now: Date, in session: any StorageSession) throws {
        guard !deviceIDs.isEmpty else { return }
        let db = try session.postgresConnection()
        let expires = signal.expiresAt ?? now.addingTimeInterval(Self.defaultLifetime)
        let json = try OutboxText.encode(signal)
        for device in deviceIDs {
            try db.run("""
                INSERT INTO mobile_push_outbox (wake_id, delivery_id, device_id, signal, next_attempt_at, expires_at, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                """, TimeOrderedID.uuidText(now: now), deliveryID, device, json, now.postgresMillis, expires.postgresMillis, now.postgresMillis)
        }
    }

    private static func entry(_ row: PostgresRow) -> OutboxEntry? {
        guard let json = row.string("signal"), var signal = OutboxText.decode(json),
              let wake = row.string("wake_id").flatMap(UUID.init(uuidString:)) else { return nil }
        signal.wakeID = wake
        var entry = OutboxEntry(id: row.int("id") ?? 0, wakeID: wake, deliveryID: row.string("delivery_id"), deviceID: row.string("device_id") ?? "",
                                signal: signal, state: OutboxEntry.State(rawValue: row.string("state") ?? "") ?? .pending,
                                attempts: Int(row.int("attempts") ?? 0), nextAttemptAt: Date(postgresMillis: row.int("next_attempt_at") ?? 0),
                                expiresAt: Date(postgresMillis: row.int("expires_at") ?? 0), transport: row.string("transport"), outcome: row.string("outcome"))
        entry.createdAt = Date(postgresMillis: row.int("created_at") ?? 0)
        entry.claim = row.int("claims") ?? 0
        return entry
    }

    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [OutboxEntry] {
        try await pool.transaction { db in
            try db.query(PostgresOutboxClaims.claim("mobile_push_outbox"), now.postgresMillis, limit, owner, Int64(lease * 1000))
        }.compactMap(Self.entry).sorted { $0.id < $1.id }
    }

    public func nextDue() async throws -> Date? {
        try await pool.withConnection { db in
            try db.query("SELECT MIN(next_attempt_at) AS t FROM mobile_push_outbox WHERE state = 'pending'").first?.int("t").map { Date(postgresMillis: $0) }
        }
    }

    @discardableResult
    public func settle(_ id: Int64, claim: Int64, owner: String, state: OutboxEntry.State, transport: String?, outcome: String, at now: Date,
                       events: [DeliveryEvent]) async throws -> Bool {
        try await pool.transaction { db in
            let settled = try db.run("""
                UPDATE mobile_push_outbox SET state = $1, transport = $2, outcome = $3, attempts = attempts + $4, finished_at = $5,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = $6 AND claims = $7 AND lease_owner = $8 AND state = 'pending'
                """, state.rawValue, transport, outcome, state == .skipped ? 0 : 1, now.postgresMillis, id, claim, owner) > 0
            try Self.appendEvents(events, settled: settled, in: db)
            return settled
        }
    }

    @discardableResult
    public func reschedule(_ id: Int64, claim: Int64, owner: String, at next: Date, transport: String, outcome: String,
                           events: [DeliveryEvent]) async throws -> Bool {
        try await pool.transaction { db in
            let rescheduled = try db.run("""
                UPDATE mobile_push_outbox SET next_attempt_at = $1, transport = $2, outcome = $3, attempts = attempts + 1,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = $4 AND claims = $5 AND lease_owner = $6 AND state = 'pending'
                """, next.postgresMillis, transport, outcome, id, claim, owner) > 0
            try Self.appendEvents(events, settled: rescheduled, in: db)
            return rescheduled
        }
    }

    public func rejectToken(_ id: Int64, claim: Int64, owner: String, deviceID: String, token: String, transport: String, outcome: String, at now: Date,
                            events: [DeliveryEvent]) async throws {
        try await pool.transaction { db in
            let settled = try db.run("""
                UPDATE mobile_push_outbox SET state = 'failed', transport = $1, outcome = $2, attempts = attempts + 1, finished_at = $3,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = $4 AND claims = $5 AND lease_owner = $6 AND state = 'pending'
                """, transport, outcome, now.postgresMillis, id, claim, owner) > 0
            // Unless the app has registered another token since: that one is alive.
            try db.run("UPDATE mobile_devices SET push_token = NULL WHERE id = $1 AND push_token = $2", deviceID, token)
            try Self.appendEvents(events, settled: settled, in: db)
        }
    }

    /// A row's timeline steps, written with its settle; with the claim lost, only the attempts (they happened).
    static func appendEvents(_ events: [DeliveryEvent], settled: Bool, in db: PostgresConnection) throws {
        for event in settled ? events : events.filter({ $0.kind == .attempt }) where event.kind != .read && event.kind != .stored {
            try db.run("""
                INSERT INTO mobile_delivery_events (delivery_id, device_id, wake_id, kind, at, transport, outcome, status, reason, service_id,
                                                    latency_ms, next_attempt_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                """, event.deliveryID, event.deviceID, event.wakeID, event.kind.rawValue, event.at.postgresMillis, event.transport,
                       event.outcome, event.status.map(Int64.init), event.reason, event.serviceID, event.latencyMilliseconds,
                       event.nextAttemptAt?.postgresMillis)
        }
    }

    /// Forgets settled wake-ups in batches (short transactions, so claims never queue behind one long delete).
    public func removeSettled(before cutoff: Date) async throws -> Int {
        try await PostgresOutboxClaims.removeFinished("mobile_push_outbox", before: cutoff, pool: pool)
    }

    public func releaseAbandonedLeases(ownOwner: String) async throws -> Int {
        try await pool.transaction { db in try PostgresOutboxClaims.releaseAbandoned("mobile_push_outbox", ownOwner: ownOwner, in: db) }
    }

    public func entries(deliveryID: String?) async throws -> [OutboxEntry] {
        try await pool.withConnection { db in
            if let deliveryID {
                return try db.query("SELECT * FROM mobile_push_outbox WHERE delivery_id = $1 ORDER BY id", deliveryID).compactMap(Self.entry)
            }
            return try db.query("SELECT * FROM mobile_push_outbox ORDER BY id").compactMap(Self.entry)
        }
    }

    public func counts() async throws -> [OutboxEntry.State: Int] {
        try await pool.withConnection { db in
            var result: [OutboxEntry.State: Int] = [:]
            for row in try db.query("SELECT state, COUNT(*) AS n FROM mobile_push_outbox GROUP BY state") {
                if let state = row.string("state").flatMap(OutboxEntry.State.init(rawValue:)) { result[state] = Int(row.int("n") ?? 0) }
            }
            return result
        }
    }

    public func health(transports: [String]) async throws -> PushOutboxHealth {
        try await pool.withConnection { db in
            let pending = try db.query("SELECT count(*) AS n, min(created_at) AS oldest FROM mobile_push_outbox WHERE state = 'pending'").first
            var last: [String: PushOutboxHealth.LastOutcome] = [:]
            for transport in transports {
                let row = try db.query("""
                    SELECT state, outcome, finished_at FROM mobile_push_outbox
                    WHERE id > (SELECT coalesce(max(id), 0) - $1 FROM mobile_push_outbox) AND transport = $2 AND finished_at IS NOT NULL
                    ORDER BY finished_at DESC LIMIT 1
                    """, PushOutboxHealth.window, transport).first
                if let row, let at = row.int("finished_at") {
                    last[transport] = .init(state: row.string("state") ?? "", outcome: row.string("outcome"), at: Date(postgresMillis: at))
                }
            }
            return PushOutboxHealth(pending: Int(pending?.int("n") ?? 0), oldestPendingAt: pending?.int("oldest").map(Date.init(postgresMillis:)),
                                    lastOutcomes: last)
        }
    }
}
