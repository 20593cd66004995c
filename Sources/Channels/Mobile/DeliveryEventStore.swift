import ChannelAPI
import Foundation
import JSON
import SQLite

/// One step of a line's path to a phone, as `mobile_delivery_events` keeps it: append-only, written in the
/// transaction that made it true (the line's insert, the outbox row's settle), so the timeline never says more
/// or less than the rows it describes.
public struct DeliveryEvent: Sendable, Equatable {
    /// The steps a timeline shows. `stored` (the line's own row) and `read` (its receipt) are read from their tables.
    public enum Kind: String, Sendable, CaseIterable {
        case stored, queued, attempt
        case retryScheduled = "retry_scheduled"
        case tokenRejected = "token_rejected"
        case sent, failed, skipped, fetched, read
    }

    public var kind: Kind
    public var at: Date
    /// nil for a wake-up that belongs to no line (an approval, a command, a test push).
    public var deliveryID: String?
    /// nil only for the line's own step (`stored`), which every recipient's timeline starts with.
    public var deviceID: String?
    /// The outbox row's wake id (its APNs `apns-id` when the transport sends one).
    public var wakeID: String?
    public var transport: String?
    /// For an attempt: `delivered`, `retry`, `token_rejected` or `failed`.
    public var outcome: String?
    public var status: Int?
    public var reason: String?
    public var serviceID: String?
    public var latencyMilliseconds: Int64?
    public var nextAttemptAt: Date?

    public init(kind: Kind, at: Date, deliveryID: String?, deviceID: String?, wakeID: String? = nil, transport: String? = nil,
                outcome: String? = nil, status: Int? = nil, reason: String? = nil, serviceID: String? = nil,
                latencyMilliseconds: Int64? = nil, nextAttemptAt: Date? = nil) {
        self.kind = kind
        self.at = at
        self.deliveryID = deliveryID
        self.deviceID = deviceID
        self.wakeID = wakeID
        self.transport = transport
        self.outcome = outcome
        self.status = status
        self.reason = reason
        self.serviceID = serviceID
        self.latencyMilliseconds = latencyMilliseconds
        self.nextAttemptAt = nextAttemptAt
    }

    /// One try of a wake-up, as the transport reported it.
    public static func attempt(_ attempt: WakeAttempt, of entry: OutboxEntry, transport: String, at: Date) -> DeliveryEvent {
        DeliveryEvent(kind: .attempt, at: at, deliveryID: entry.deliveryID, deviceID: entry.deviceID, wakeID: entry.wakeID.uuidString.lowercased(),
                      transport: transport, outcome: attempt.outcome.label, status: attempt.status, reason: attempt.reason.map(Self.bounded),
                      serviceID: attempt.serviceID.map(Self.bounded), latencyMilliseconds: attempt.latencyMilliseconds)
    }

    /// A step of an outbox row that is not an attempt (sent, retry scheduled, token rejected, failed, skipped).
    public static func step(_ kind: Kind, of entry: OutboxEntry, transport: String?, reason: String? = nil, nextAttemptAt: Date? = nil,
                            at: Date) -> DeliveryEvent {
        DeliveryEvent(kind: kind, at: at, deliveryID: entry.deliveryID, deviceID: entry.deviceID, wakeID: entry.wakeID.uuidString.lowercased(),
                      transport: transport, reason: reason.map(Self.bounded), nextAttemptAt: nextAttemptAt)
    }

    /// A test push's steps (no line): its attempt and, when the service rejected the token, the rejection.
    public static func testPush(_ attempt: WakeAttempt, deviceID: String, transport: String, at now: Date) -> [DeliveryEvent] {
        var steps = [DeliveryEvent(kind: .attempt, at: now, deliveryID: nil, deviceID: deviceID, transport: transport, outcome: attempt.outcome.label,
                                   status: attempt.status, reason: attempt.reason.map(bounded), serviceID: attempt.serviceID.map(bounded),
                                   latencyMilliseconds: attempt.latencyMilliseconds)]
        if case .tokenRejected(let reason) = attempt.outcome {
            steps.append(DeliveryEvent(kind: .tokenRejected, at: now, deliveryID: nil, deviceID: deviceID, transport: transport, reason: bounded(reason)))
        }
        return steps
    }

    /// Services' texts are kept short: a timeline names a reason, it does not archive an answer.
    static func bounded(_ text: String) -> String { text.count <= 300 ? text : String(text.prefix(300)) }
}

/// Reads and writes `mobile_delivery_events`. Writes run inside the caller's transaction; reads are plain reads.
public struct DeliveryEventStore: Sendable {
    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    static let insertSQL = """
        INSERT INTO mobile_delivery_events (delivery_id, device_id, wake_id, kind, at, transport, outcome, status, reason, service_id,
                                            latency_ms, next_attempt_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// Appends `events` inside the caller's transaction (`stored` and `read` are left to the line and its receipts).
    static func append(_ events: [DeliveryEvent], in db: Connection) throws {
        for event in events where event.kind != .read && event.kind != .stored {
            try db.run(insertSQL, event.deliveryID, event.deviceID, event.wakeID, event.kind.rawValue, event.at.sqliteMillis, event.transport,
                       event.outcome, event.status.map(Int64.init), event.reason, event.serviceID, event.latencyMilliseconds,
                       event.nextAttemptAt?.sqliteMillis)
        }
    }

    /// The recipients of a new line that get no wake-up, with why, inside the line's transaction. The line's own
    /// `stored` step is the line itself (its row, its time), and each wake-up's `queued` step is its outbox row until
    /// its first settle writes it here: a line costs no more rows than before unless a phone cannot be woken.
    static func appendSkipped(deliveryID: String, skipped: [(deviceID: String, reason: String)], now: Date, in db: Connection) throws {
        for device in skipped {
            try db.run("INSERT INTO mobile_delivery_events (delivery_id, device_id, kind, at, reason) VALUES (?, ?, 'skipped', ?, ?)",
                       deliveryID, device.deviceID, now.sqliteMillis, device.reason)
        }
    }

    /// `queued` steps of wake-ups not yet tried, read from their outbox rows (the first settle records them).
    public func waitingWakeUps(deliveryIDs: [String]) throws -> [String: [DeliveryEvent]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try database.read { db in
            try db.query("""
                SELECT delivery_id, device_id, wake_id, created_at FROM mobile_push_outbox
                WHERE delivery_id IN (SELECT value FROM json_each(?)) AND state = 'pending' AND attempts = 0 ORDER BY id
                """, JSONValue.array(deliveryIDs.map(JSONValue.string)).serialized())
        }
        var result: [String: [DeliveryEvent]] = [:]
        for row in rows {
            guard let line = row.string("delivery_id"), let at = row.date("created_at") else { continue }
            result[line, default: []].append(DeliveryEvent(kind: .queued, at: at, deliveryID: line, deviceID: row.string("device_id"),
                                                           wakeID: row.string("wake_id")))
        }
        return result
    }

    static func event(_ row: Row) -> DeliveryEvent? {
        guard let kind = row.string("kind").flatMap(DeliveryEvent.Kind.init(rawValue:)), let at = row.date("at") else { return nil }
        return DeliveryEvent(kind: kind, at: at, deliveryID: row.string("delivery_id"), deviceID: row.string("device_id"), wakeID: row.string("wake_id"),
                             transport: row.string("transport"), outcome: row.string("outcome"), status: row.int("status").map(Int.init),
                             reason: row.string("reason"), serviceID: row.string("service_id"), latencyMilliseconds: row.int("latency_ms"),
                             nextAttemptAt: row.date("next_attempt_at"))
    }

    /// Every stored step of one line, in the order they were written.
    public func events(deliveryID: String) throws -> [DeliveryEvent] {
        try database.read { db in
            try db.query("SELECT * FROM mobile_delivery_events WHERE delivery_id = ? ORDER BY id", deliveryID).compactMap(Self.event)
        }
    }

    /// The stored steps of several lines at once (a page of the console's inbox), by line, each in written order.
    public func events(deliveryIDs: [String]) throws -> [String: [DeliveryEvent]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        // One statement whatever the page's size: the ids travel as one JSON array.
        let rows = try database.read { db in
            try db.query("""
                SELECT * FROM mobile_delivery_events WHERE delivery_id IN (SELECT value FROM json_each(?)) ORDER BY id
                """, JSONValue.array(deliveryIDs.map(JSONValue.string)).serialized())
        }
        var result: [String: [DeliveryEvent]] = [:]
        for event in rows.compactMap(Self.event) { if let id = event.deliveryID { result[id, default: []].append(event) } }
        return result
    }

    /// Who each of these lines was written for (the recipients fixed when it was stored), by line.
    public func recipients(deliveryIDs: [String]) throws -> [String: [String]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try database.read { db in
            try db.query("""
                SELECT delivery_id, device_id FROM mobile_delivery_recipients WHERE delivery_id IN (SELECT value FROM json_each(?))
                ORDER BY delivery_id, device_id
                """, JSONValue.array(deliveryIDs.map(JSONValue.string)).serialized())
        }
        var result: [String: [String]] = [:]
        for row in rows { if let line = row.string("delivery_id"), let device = row.string("device_id") { result[line, default: []].append(device) } }
        return result
    }

    /// When each device read each of these lines (its receipt), by line and device.
    public func receipts(deliveryIDs: [String]) throws -> [String: [String: Date]] {
        guard !deliveryIDs.isEmpty else { return [:] }
        let rows = try database.read { db in
            try db.query("""
                SELECT delivery_id, device_id, read_at FROM mobile_receipts WHERE delivery_id IN (SELECT value FROM json_each(?))
                """, JSONValue.array(deliveryIDs.map(JSONValue.string)).serialized())
        }
        var result: [String: [String: Date]] = [:]
        for row in rows {
            if let line = row.string("delivery_id"), let device = row.string("device_id"), let at = row.date("read_at") { result[line, default: [:]][device] = at }
        }
        return result
    }

    /// A device's latest wake-up attempt (for any line or none) and its latest token rejection: two key lookups
    /// through `mobile_device_last_wakes` (migration `mobile.13-device-last-wakes`), whatever the history.
    public func wakeSummary(deviceID: String) throws -> (lastAttempt: DeliveryEvent?, lastRejection: DeliveryEvent?) {
        try database.read { db in
            let attempt = try db.query("""
                SELECT e.* FROM mobile_device_last_wakes w JOIN mobile_delivery_events e ON e.id = w.attempt_id WHERE w.device_id = ?
                """, deviceID).first.flatMap(Self.event)
            let rejection = try db.query("""
                SELECT e.* FROM mobile_device_last_wakes w JOIN mobile_delivery_events e ON e.id = w.rejection_id WHERE w.device_id = ?
                """, deviceID).first.flatMap(Self.event)
            return (attempt, rejection)
        }
    }

    /// Records a test push's attempt, and when the service rejected the token, the rejection and the cleared token,
    /// in one transaction (the same clearing the outbox does, so the console says why the token went).
    public func recordTestPush(_ attempt: WakeAttempt, deviceID: String, token: String, transport: String, at now: Date) throws {
        try database.transaction { db in
            try Self.append(DeliveryEvent.testPush(attempt, deviceID: deviceID, transport: transport, at: now), in: db)
            if case .tokenRejected = attempt.outcome {
                try db.run("UPDATE mobile_devices SET push_token = NULL WHERE id = ? AND push_token = ?", deviceID, token)
            }
        }
    }

    /// How many Live Activity tokens the gateway holds for a device: one per reported activity, and its push-to-start token.
    public func liveActivityTokenCount(deviceID: String) throws -> Int {
        try database.read { db in
            Int(try db.query("""
                SELECT (SELECT COUNT(*) FROM mobile_live_activities WHERE device_id = ?)
                     + (SELECT COUNT(*) FROM mobile_devices WHERE id = ? AND live_start_token IS NOT NULL) AS n
                """, deviceID, deviceID).first?.int("n") ?? 0)
        }
    }
}
