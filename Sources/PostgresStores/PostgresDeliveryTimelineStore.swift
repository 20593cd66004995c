import ChannelAPI
import Foundation
import JSON
import Mobile
import PostgreSQL

/// The console's timeline reads on PostgreSQL: the steps every node's outbox and inbox wrote to
/// `mobile_delivery_events`, waiting wake-ups from the shared outbox, recipients and receipts. A page of lines is one
/// statement per table whatever its size: the ids travel as one JSON array.
public struct PostgresDeliveryTimelineStore: DeliveryTimelineStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    private static func idList(_ ids: [String]) -> String { JSONValue.array(ids.map(JSONValue.string)).serialized() }

    private static func date(_ row: PostgresRow, _ column: String) -> Date? { row.int(column).map(Date.init(postgresMillis:)) }

    static func event(_ row: PostgresRow) -> DeliveryEvent? {
        guard let kind = row.string("kind").flatMap(DeliveryEvent.Kind.init(rawValue:)), let at = date(row, "at") else { return nil }
        return DeliveryEvent(kind: kind, at: at, deliveryID: row.string("delivery_id"), deviceID: row.string("device_id"), wakeID: row.string("wake_id"),
                             transport: row.string("transport"), outcome: row.string("outcome"), status: row.int("status").map(Int.init),
                             reason: row.string("reason"), serviceID: row.string("service_id"), latencyMilliseconds: row.int("latency_ms"),
                             nextAttemptAt: date(row, "next_attempt_at"))
    }

    public func events(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { db in
            try db.query("""
                SELECT * FROM mobile_delivery_events WHERE delivery_id IN (SELECT json_array_elements_text($1::json)) ORDER BY id
                """, Self.idList(deliveryIDs))
        }
        var result: [String: [DeliveryEvent]] = [:]
        for event in rows.compactMap(Self.event) { if let id = event.deliveryID { result[id, default: []].append(event) } }
        return result
    }

    public func waitingWakeUps(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { db in
            try db.query("""
                SELECT delivery_id, device_id, wake_id, created_at FROM mobile_push_outbox
                WHERE delivery_id IN (SELECT json_array_elements_text($1::json)) AND state = 'pending' AND attempts = 0 ORDER BY id
                """, Self.idList(deliveryIDs))
        }
        var result: [String: [DeliveryEvent]] = [:]
        for row in rows {
            guard let line = row.string("delivery_id"), let at = Self.date(row, "created_at") else { continue }
            result[line, default: []].append(DeliveryEvent(kind: .queued, at: at, deliveryID: line, deviceID: row.string("device_id"),
                                                           wakeID: row.string("wake_id")))
        }
        return result
    }

    public func recipients(deliveryIDs: [String]) async throws -> [String: [String]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { db in
            try db.query("""
                SELECT delivery_id, device_id FROM mobile_delivery_recipients WHERE delivery_id IN (SELECT json_array_elements_text($1::json))
                ORDER BY delivery_id, device_id
                """, Self.idList(deliveryIDs))
        }
        var result: [String: [String]] = [:]
        for row in rows { if let line = row.string("delivery_id"), let device = row.string("device_id") { result[line, default: []].append(device) } }
        return result
    }

    public func receipts(deliveryIDs: [String]) async throws -> [String: [String: Date]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { db in
            try db.query("""
                SELECT delivery_id, device_id, read_at FROM mobile_receipts WHERE delivery_id IN (SELECT json_array_elements_text($1::json))
                """, Self.idList(deliveryIDs))
        }
        var result: [String: [String: Date]] = [:]
        for row in rows {
            if let line = row.string("delivery_id"), let device = row.string("device_id"), let at = Self.date(row, "read_at") { result[line, default: [:]][device] = at }
        }
        return result
    }

    public func wakeSummary(deviceID: String) async throws -> DeviceWakeSummary {
        try await pool.withConnection { db in
            let attempt = try db.query("""
                SELECT * FROM mobile_delivery_events WHERE device_id = $1 AND kind IN ('attempt', 'token_rejected') AND kind = 'attempt'
                ORDER BY id DESC LIMIT 1
                """, deviceID).first.flatMap(Self.event)
            let rejection = try db.query("""
                SELECT * FROM mobile_delivery_events WHERE device_id = $1 AND kind IN ('attempt', 'token_rejected') AND kind = 'token_rejected'
                ORDER BY id DESC LIMIT 1
                """, deviceID).first.flatMap(Self.event)
            return DeviceWakeSummary(lastAttempt: attempt, lastRejection: rejection)
        }
    }

    public func recordTestPush(_ attempt: WakeAttempt, deviceID: String, token: String, transport: String, at now: Date) async throws {
        try await pool.transaction { db in
            let events = DeliveryEvent.testPush(attempt, deviceID: deviceID, transport: transport, at: now)
            if case .tokenRejected = attempt.outcome {
                // Unless the app has registered another token since: that one is alive.
                try db.run("UPDATE mobile_devices SET push_token = NULL WHERE id = $1 AND push_token = $2", deviceID, token)
            }
            try PostgresPushOutbox.appendEvents(events, settled: true, in: db)
        }
    }

    public func liveActivityTokenCount(deviceID: String) async throws -> Int {
        try await pool.withConnection { db in
            Int(try db.query("""
                SELECT (SELECT COUNT(*) FROM mobile_live_activities WHERE device_id = $1)
                     + (SELECT COUNT(*) FROM mobile_devices WHERE id = $1 AND live_start_token IS NOT NULL) AS n
                """, deviceID).first?.int("n") ?? 0)
        }
    }
}
