import JSON
import ChannelAPI
import Crypto
import Foundation
import Glibc
import Outbox
import SQLite
import Storage

/// One wake-up waiting in (or done with) the durable push outbox.
public struct OutboxEntry: Sendable, Equatable {
    public enum State: String, Sendable {
        case pending, sent, failed, skipped
    }
    public var id: Int64
    public var wakeID: UUID
    public var deliveryID: String?
    public var deviceID: String
    public var signal: WakeSignal
    public var state: State
    public var attempts: Int
    public var nextAttemptAt: Date
    public var expiresAt: Date
    public var transport: String?
    public var outcome: String?
    /// When it was queued (with its line, or by an approval or a command).
    public var createdAt = Date(timeIntervalSince1970: 0)
    /// Which claim of the row this is (the fence a settle names; 0 for a row read outside a claim).
    public var claim: Int64 = 0

    public init(id: Int64, wakeID: UUID, deliveryID: String?, deviceID: String, signal: WakeSignal, state: State, attempts: Int, nextAttemptAt: Date,
                expiresAt: Date, transport: String?, outcome: String?) {
        self.id = id
        self.wakeID = wakeID
        self.deliveryID = deliveryID
        self.deviceID = deviceID
        self.signal = signal
        self.state = state
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.expiresAt = expiresAt
        self.transport = transport
        self.outcome = outcome
    }
}

/// What the dispatcher needs of the push outbox: due rows claimed with a lease (one owner at a time, so several
/// dispatchers or gateways never send one twice), settled once, rescheduled, and the counts housekeeping reads.
/// A protocol because a second engine (PostgreSQL, `FOR UPDATE SKIP LOCKED`) will keep it too; its rows are
/// written in the transaction of the inbox line they wake for, by the inbox's own engine.
///
/// The dispatcher's writes are async: they run off Swift's cooperative pool (SQLite's own threads, and the settles of
/// concurrent wake-ups share one commit), so a hundred answers arriving at once never hold the threads that serve
/// requests while they wait for the write lock or the disk.
public protocol PushOutbox: Sendable {
    /// Queues one wake-up per device inside the caller's transaction (the one that writes the line, the approval or
    /// the command it wakes for), so the row commits with what it announces, or not at all.
    func enqueue(_ signal: WakeSignal, deliveryID: String?, deviceIDs: [String], now: Date, in session: any StorageSession) throws
    /// Leases up to `limit` due rows to `owner` (rows whose lease ran out included: any claimer rescues them), each
    /// claim counted: the entry's `claim` is the fence its settle must name.
    func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [OutboxEntry]
    /// When the next row falls due (nil: none waits).
    func nextDue() async throws -> Date?
    /// Ends a claimed row and appends its timeline `events` in the same transaction; false when its claim was taken
    /// over (then only the attempts among `events` are kept: they happened, the rest is the new holder's).
    @discardableResult
    func settle(_ id: Int64, claim: Int64, owner: String, state: OutboxEntry.State, transport: String?, outcome: String, at now: Date,
                events: [DeliveryEvent]) async throws -> Bool
    @discardableResult
    func reschedule(_ id: Int64, claim: Int64, owner: String, at next: Date, transport: String, outcome: String, events: [DeliveryEvent]) async throws -> Bool
    /// The service refused the token: the row fails, the device forgets the token and the timeline says so, in one step.
    func rejectToken(_ id: Int64, claim: Int64, owner: String, deviceID: String, token: String, transport: String, outcome: String, at now: Date,
                     events: [DeliveryEvent]) async throws
    func removeSettled(before cutoff: Date) async throws -> Int
    /// Leases a previous run of this host left behind, released at start.
    func releaseAbandonedLeases(ownOwner: String) async throws -> Int
    func entries(deliveryID: String?) async throws -> [OutboxEntry]
    func counts() async throws -> [OutboxEntry.State: Int]
    /// What waits, since when, and each of `transports`' latest finished wake-up (the health page, the metrics).
    func health(transports: [String]) async throws -> PushOutboxHealth
}

extension PushOutbox {
    public func entries() async throws -> [OutboxEntry] { try await entries(deliveryID: nil) }

    /// The same steps with nothing for the timeline.
    @discardableResult
    public func settle(_ entry: OutboxEntry, owner: String, state: OutboxEntry.State, transport: String?, outcome: String, at now: Date) async throws -> Bool {
        try await settle(entry.id, claim: entry.claim, owner: owner, state: state, transport: transport, outcome: outcome, at: now, events: [])
    }

    @discardableResult
    public func reschedule(_ entry: OutboxEntry, owner: String, at next: Date, transport: String, outcome: String) async throws -> Bool {
        try await reschedule(entry.id, claim: entry.claim, owner: owner, at: next, transport: transport, outcome: outcome, events: [])
    }
}

/// The push outbox in SQLite: rows are written with the inbox line, claimed with a lease, settled once.
public struct SQLitePushOutbox: PushOutbox {

    /// How long a wake-up stays worth sending; after that it is recorded as expired.
    public static let defaultLifetime: TimeInterval = 24 * 3600

    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    static func ms(_ d: Date) -> Int64 { d.sqliteMillis }
    static func date(_ v: Int64?) -> Date { Date(sqliteMillis: v ?? 0) }

    /// Adds one wake-up per device, inside the caller's transaction (the one that writes the inbox line).
    /// The signal as stored: its wake id lives in its own column, so one encoding serves every device.
    /// Written directly in WakeSignal's Codable shape (JSONEncoder is the costliest step of a delivery otherwise);
    /// `OutboxText.decode` reads it back (directly, or through `JSONDecoder` for any other shape).
    static func encode(_ signal: WakeSignal) throws -> String {
        var fields: [String: JSONValue] = [
            "kind": .string(signal.kind.rawValue), "category": .string(signal.category.rawValue), "title": .string(signal.title),
            "body": .string(signal.body), "deepLink": .string(signal.deepLink), "threadID": .string(signal.threadID),
            "timeSensitive": .bool(signal.timeSensitive), "extra": .object(signal.extra.mapValues(JSONValue.string)),
            "priority": .number(Double(signal.priority.rawValue)),
        ]
        if let id = signal.deliveryID { fields["deliveryID"] = .string(id) }
        if let collapse = signal.collapseID { fields["collapseID"] = .string(collapse) }
        if let expires = signal.expiresAt { fields["expiresAt"] = .number(expires.timeIntervalSinceReferenceDate) }
        return JSONValue.object(fields).serialized()
    }

    static func enqueue(_ signal: WakeSignal, encoded: String? = nil, deliveryID: String?, deviceIDs: [String], now: Date, in db: Connection) throws {
        guard !deviceIDs.isEmpty else { return }
        let expires = signal.expiresAt ?? now.addingTimeInterval(defaultLifetime)
        let json = try encoded ?? encode(signal)
        for device in deviceIDs {
            try db.run("""
                INSERT INTO mobile_push_outbox (wake_id, delivery_id, device_id, signal, next_attempt_at, expires_at, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """, TimeOrderedID.uuidText(now: now), deliveryID, device, json, ms(now), ms(expires), ms(now))
        }
    }

    public func enqueue(_ signal: WakeSignal, deliveryID: String?, deviceIDs: [String], now: Date, in session: any StorageSession) throws {
        try Self.enqueue(signal, deliveryID: deliveryID, deviceIDs: deviceIDs, now: now, in: session.sqliteConnection())
    }

    private static func entry(_ row: Row) -> OutboxEntry? {
        guard let json = row.string("signal"), var signal = OutboxText.decode(json),
              let wake = row.string("wake_id").flatMap(UUID.init(uuidString:)) else { return nil }
        signal.wakeID = wake
        var entry = OutboxEntry(id: row.int("id") ?? 0, wakeID: wake, deliveryID: row.string("delivery_id"), deviceID: row.string("device_id") ?? "",
                           signal: signal, state: OutboxEntry.State(rawValue: row.string("state") ?? "") ?? .pending,
                           attempts: Int(row.int("attempts") ?? 0), nextAttemptAt: date(row.int("next_attempt_at")),
                           expiresAt: date(row.int("expires_at")), transport: row.string("transport"), outcome: row.string("outcome"))
        entry.createdAt = date(row.int("created_at"))
        entry.claim = row.int("claims") ?? 0
        return entry
    }

    /// Leases up to `limit` due rows to `owner`. Another process sharing the file cannot claim them until the lease ends.
    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [OutboxEntry] {
        try await database.asyncTransaction { db in
            try db.query("""
                UPDATE mobile_push_outbox SET lease_owner = ?, lease_until = ?, claims = claims + 1
                WHERE id IN (SELECT id FROM mobile_push_outbox
                             WHERE state = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)
                             ORDER BY next_attempt_at, id LIMIT ?)
                RETURNING *
                """, owner, Self.ms(now.addingTimeInterval(lease)), Self.ms(now), Self.ms(now), limit)
        }.compactMap(Self.entry).sorted { $0.id < $1.id }
    }

    /// When the next pending row becomes due, if any.
    public func nextDue() async throws -> Date? {
        try await database.asyncRead { db in
            try db.query("SELECT MIN(next_attempt_at) AS t FROM mobile_push_outbox WHERE state = 'pending'").first?.int("t").map { Self.date($0) }
        }
    }

    /// Settles a claimed row. Only the lease holder may; a row whose lease was taken over is left alone. Settles
    /// arriving together share one commit (group commit); the statement is safe to run again if a batch is retried.
    @discardableResult
    public func settle(_ id: Int64, claim: Int64, owner: String, state: OutboxEntry.State, transport: String?, outcome: String, at now: Date,
                       events: [DeliveryEvent]) async throws -> Bool {
        try await database.groupTransaction { db in
            let settled = try db.run("""
                UPDATE mobile_push_outbox SET state = ?, transport = ?, outcome = ?, attempts = attempts + ?, finished_at = ?,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = ? AND claims = ? AND lease_owner = ? AND state = 'pending'
                """, state.rawValue, transport, outcome, state == .skipped ? 0 : 1, Self.ms(now), id, claim, owner) > 0
            try Self.appendEvents(events, settled: settled, in: db)
            return settled
        }
    }

    /// Puts a claimed row back for a later attempt.
    @discardableResult
    public func reschedule(_ id: Int64, claim: Int64, owner: String, at next: Date, transport: String, outcome: String, events: [DeliveryEvent]) async throws -> Bool {
        try await database.groupTransaction { db in
            let rescheduled = try db.run("""
                UPDATE mobile_push_outbox SET next_attempt_at = ?, transport = ?, outcome = ?, attempts = attempts + 1,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = ? AND claims = ? AND lease_owner = ? AND state = 'pending'
                """, Self.ms(next), transport, outcome, id, claim, owner) > 0
            try Self.appendEvents(events, settled: rescheduled, in: db)
            return rescheduled
        }
    }

    /// The service said the token is dead: settle the row and clear the device's token, unless the app has
    /// registered a different one meanwhile.
    public func rejectToken(_ id: Int64, claim: Int64, owner: String, deviceID: String, token: String, transport: String, outcome: String, at now: Date,
                            events: [DeliveryEvent]) async throws {
        try await database.groupTransaction { db in
            let settled = try db.run("""
                UPDATE mobile_push_outbox SET state = 'failed', transport = ?, outcome = ?, attempts = attempts + 1, finished_at = ?,
                                              lease_owner = NULL, lease_until = NULL
                WHERE id = ? AND claims = ? AND lease_owner = ? AND state = 'pending'
                """, transport, outcome, Self.ms(now), id, claim, owner) > 0
            try db.run("UPDATE mobile_devices SET push_token = NULL WHERE id = ? AND push_token = ?", deviceID, token)
            try Self.appendEvents(events, settled: settled, in: db)
        }
    }

    /// A row's timeline steps, written with its settle. With the lease lost, only the attempts: they happened,
    /// and the row's end is the new owner's to record.
    private static func appendEvents(_ events: [DeliveryEvent], settled: Bool, in db: Connection) throws {
        guard !events.isEmpty else { return }
        try DeliveryEventStore.append(settled ? events : events.filter { $0.kind == .attempt }, in: db)
    }

    /// Forgets wake-ups settled (sent, failed, skipped) before `cutoff`; pending ones are never touched.
    @discardableResult
    public func removeSettled(before cutoff: Date) async throws -> Int {
        try await database.asyncDeleteInBatches(from: "mobile_push_outbox", where: "state <> 'pending' AND finished_at < ?", arguments: [Self.ms(cutoff)])
    }

    /// Frees leases held by processes on this host that no longer exist (after a crash or kill -9).
    public func releaseAbandonedLeases(ownOwner: String) async throws -> Int {
        try await database.asyncTransaction { db in
            let owners = try db.query("SELECT DISTINCT lease_owner FROM mobile_push_outbox WHERE state = 'pending' AND lease_owner IS NOT NULL")
                .compactMap { $0.string("lease_owner") }
            return try LeaseOwners.abandoned(among: owners, ownOwner: ownOwner).reduce(0) { released, owner in
                try released + db.run("UPDATE mobile_push_outbox SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? AND state = 'pending'", owner)
            }
        }
    }

    public func entries(deliveryID: String?) async throws -> [OutboxEntry] {
        try await database.asyncRead { db in
            if let deliveryID {
                return try db.query("SELECT * FROM mobile_push_outbox WHERE delivery_id = ? ORDER BY id", deliveryID).compactMap(Self.entry)
            }
            return try db.query("SELECT * FROM mobile_push_outbox ORDER BY id").compactMap(Self.entry)
        }
    }

    /// Rows per state.
    public func counts() async throws -> [OutboxEntry.State: Int] {
        try await database.asyncRead { db in
            var result: [OutboxEntry.State: Int] = [:]
            for row in try db.query("SELECT state, COUNT(*) AS n FROM mobile_push_outbox GROUP BY state") {
                if let s = row.string("state").flatMap(OutboxEntry.State.init(rawValue:)) { result[s] = Int(row.int("n") ?? 0) }
            }
            return result
        }
    }

}

/// The outbox's stored form of a signal, public for its round-trip test.
public enum OutboxText {
    public static func encode(_ signal: WakeSignal) throws -> String { try SQLitePushOutbox.encode(signal) }

    /// A stored signal read back (nil: not one): what `encode` writes is read directly (JSONDecoder was 5% of the
    /// push dispatcher's CPU, in the claim), anything else (a row written through JSONEncoder) by the decoder.
    public static func decode(_ text: String) -> WakeSignal? {
        if let signal = canonicalSignal(from: text) { return signal }
        return try? JSONCoding.decode(WakeSignal.self, from: Data(text.utf8))
    }

    /// The signal when `text` is exactly in the shape `encode` writes; nil for anything else.
    public static func canonicalSignal(from text: String) -> WakeSignal? {
        var reader = CanonicalJSONReader(text)
        var kind: WakeSignal.Kind?, category: String?, title: String?, body: String?, deepLink: String?, threadID: String?
        var timeSensitive: Bool?, extra: [String: String]?, priority: WakeSignal.Priority?
        var deliveryID: String?, collapseID: String?, expiresAt: Double?
        // Each key once; a value that does not read (or a kind or priority WakeSignal does not know) ends the read.
        let read = reader.object { reader, key in
            switch key {
            case "kind" where kind == nil: kind = reader.string().flatMap(WakeSignal.Kind.init(rawValue:)); return kind != nil
            case "category" where category == nil: category = reader.string(); return category != nil
            case "title" where title == nil: title = reader.string(); return title != nil
            case "body" where body == nil: body = reader.string(); return body != nil
            case "deepLink" where deepLink == nil: deepLink = reader.string(); return deepLink != nil
            case "threadID" where threadID == nil: threadID = reader.string(); return threadID != nil
            case "timeSensitive" where timeSensitive == nil: timeSensitive = reader.bool(); return timeSensitive != nil
            case "extra" where extra == nil: extra = reader.stringObject(); return extra != nil
            case "priority" where priority == nil:
                priority = reader.number().flatMap { Int(exactly: $0) }.flatMap(WakeSignal.Priority.init(rawValue:))
                return priority != nil
            case "deliveryID" where deliveryID == nil: deliveryID = reader.string(); return deliveryID != nil
            case "collapseID" where collapseID == nil: collapseID = reader.string(); return collapseID != nil
            case "expiresAt" where expiresAt == nil: expiresAt = reader.number(); return expiresAt != nil
            default: return false
            }
        }
        guard read, reader.isAtEnd, let kind, let category, let title, let body, let deepLink, let threadID, let timeSensitive, let extra,
              let priority else { return nil }
        return WakeSignal(kind: kind, category: WakeSignal.Category(rawValue: category), title: title, body: body, deepLink: deepLink,
                          threadID: threadID, timeSensitive: timeSensitive, deliveryID: deliveryID, extra: extra, priority: priority,
                          expiresAt: expiresAt.map(Date.init(timeIntervalSinceReferenceDate:)), collapseID: collapseID)
    }
}
