import Storage
import JSON
import ChannelAPI
import Crypto
import Foundation
import SQLite
import Synchronization

/// A stored inbox line.
public struct Delivery: Sendable, Equatable {
    public var seq: Int64
    public var id: String
    public var destination: Destination
    public var agentID: String
    public var agentName: String
    public var sessionID: String
    public var title: String
    public var body: String
    /// `parts` and `metadata` as stored: JSON this gateway wrote. Lists splice them into answers as they are;
    /// only code that wants the values decodes them.
    public var partsJSON: String
    public var metadataJSON: String
    public var createdAt: Date
    /// For the device (or person) the list was read for.
    public var readAt: Date?

    public init(seq: Int64, id: String, destination: Destination, agentID: String, agentName: String, sessionID: String, title: String,
                body: String, partsJSON: String, metadataJSON: String, createdAt: Date, readAt: Date?) {
        self.seq = seq
        self.id = id
        self.destination = destination
        self.agentID = agentID
        self.agentName = agentName
        self.sessionID = sessionID
        self.title = title
        self.body = body
        self.partsJSON = partsJSON
        self.metadataJSON = metadataJSON
        self.createdAt = createdAt
        self.readAt = readAt
    }

    /// The text of each part (stored as `{"type": "text", "text": …}` objects, as the original app reads them).
    public var parts: [String] { partObjects.compactMap(\.text) }
    /// The parts as the original app's objects.
    public var partObjects: [Part] { (try? JSONCoding.decode([Part].self, from: Data(partsJSON.utf8))) ?? [] }
    public var metadata: [String: String] { (try? JSONCoding.decode([String: String].self, from: Data(metadataJSON.utf8))) ?? [:] }
}

/// One part of a delivery as the original Soulacy app decodes it: `{type: text|image|audio|file, text?, mime_type?, data?, url?}`.
public struct Part: Codable, Sendable, Equatable {
    public var type: String
    public var text: String?
    public var mimeType: String?
    public var data: String?
    public var url: String?

    enum CodingKeys: String, CodingKey {
        case type, text, data, url
        case mimeType = "mime_type"
    }

    public static func text(_ text: String) -> Part { Part(type: "text", text: text) }
}

public enum DeviceOwnershipError: Error, Equatable {
    case ownedByAnotherSubject
}

/// A line as written: its id, the devices it is for, and how many wake-ups were queued with it.
public struct StoredDelivery: Sendable {
    public let id: String
    public let recipients: [String]
    public let wakeUps: Int
    /// Whose line it is, for the console's live updates.
    public let audience: ConsoleAudience

    public init(id: String, recipients: [String], wakeUps: Int, audience: ConsoleAudience) {
        self.id = id
        self.recipients = recipients
        self.wakeUps = wakeUps
        self.audience = audience
    }
}

/// The inbox in SQLite: deliveries, their recipients and read receipts, with the outbox rows each line wakes.
public final class MobileStore: Sendable {
    /// The System agent's id: its lines are kept but never shown to phones.
    public static let systemAgentID = "system"


    public let database: DatabasePool
    /// The engine seam's view of the same database: what routes build their answers in.
    public var transactions: any TransactionalStorage { database }
    public let outbox: any PushOutbox
    /// The phones the inbox addresses: their own aggregate (`DeviceStore`), on the same database.
    public let devices: DeviceStore
    /// Which people's inboxes changed: bumped after each commit that changes what someone's page shows, so a
    /// write for one person leaves everyone else's rendered pages current.
    public let inboxGenerations: InboxGenerations
    /// Each line's path to each phone (`mobile_delivery_events`).
    public let events: DeliveryEventStore
    /// The console's live updates: lines stored, timelines moved, devices changed.
    public let consoleEvents: ConsoleEventHub
    /// Which phone read which line, written off the inbox's hot path.
    public let fetches: DeliveryFetchStore
    let clock: any WallClock

    public init(database: DatabasePool, clock: any WallClock = SystemWallClock(), metrics: MobileMetrics? = nil) throws {
        self.database = database
        self.clock = clock
        outbox = SQLitePushOutbox(database: database)
        let generations = InboxGenerations()
        inboxGenerations = generations
        devices = DeviceStore(database: database, clock: clock, inboxGenerations: generations)
        events = DeliveryEventStore(database: database)
        let hub = ConsoleEventHub()
        consoleEvents = hub
        fetches = DeliveryFetchStore(writer: SQLiteFetchedStepWriter(database: database), clock: clock, events: hub, fetchDelay: metrics?.fetchDelay)
    }

    static func millis(_ date: Date) -> Int64 { date.sqliteMillis }
    static func date(_ millis: Int64?) -> Date? { millis.map(Date.init(sqliteMillis:)) }

    /// The newest inbox line's sequence number (0 with none).
    public func latestDeliverySeq() throws -> Int64 {
        try database.read { db in try db.query("SELECT COALESCE(MAX(seq), 0) AS s FROM mobile_deliveries").first?.int("s") ?? 0 }
    }


    // MARK: Deliveries

    /// Devices a destination addresses now.
    static func recipients(of destination: Destination, in db: Connection) throws -> [(id: String, wakeable: Bool, notificationsOn: Bool)] {
        let columns = "SELECT id, notifications_enabled = 1 AND push_token IS NOT NULL AS wakeable, notifications_enabled = 1 AS notifications_on FROM mobile_devices"
        let rows: [Row]
        switch destination {
        case .all: rows = try db.query("\(columns) ORDER BY id")
        case .user(let subject): rows = try db.query("\(columns) WHERE subject = ? ORDER BY id", subject)
        case .device(let id): rows = try db.query("\(columns) WHERE id = ?", id)
        }
        return rows.compactMap { row in row.string("id").map { ($0, row.bool("wakeable") ?? false, row.bool("notifications_on") ?? false) } }
    }

    /// Writes a delivery, its recipients and one outbox wake-up per device that takes pushes, in one transaction
    /// (committed with fsync). Returns its id, its recipients and how many wake-ups were queued.
    public func insertDelivery(_ output: Output, destination: Destination) throws -> StoredDelivery {
        let row = try PreparedInboxLine(output, destination: destination, now: clock.now())
        let stored = try database.transaction { db in try writeDelivery(row, in: db) }
        announce(stored)
        return stored
    }

    /// Many lines in one transaction and one fsync, each written as `insertDelivery` writes it (imports, and the
    /// benchmark's generator of large inboxes).
    public func insertDeliveries(_ lines: [(output: Output, destination: Destination)]) throws -> [StoredDelivery] {
        let now = clock.now()
        let rows = try lines.map { try PreparedInboxLine($0.output, destination: $0.destination, now: now) }
        let stored = try database.transaction { db in try rows.map { try writeDelivery($0, in: db) } }
        stored.forEach(announce)
        return stored
    }

    /// The same, sharing one transaction and one fsync with other deliveries written at the same moment.
    /// The encoding happens here, in parallel; only the inserts run in the shared transaction.
    public func insertDeliveryGrouped(_ output: Output, destination: Destination) async throws -> StoredDelivery {
        let row = try PreparedInboxLine(output, destination: destination, now: clock.now())
        let database = database, generations = inboxGenerations
        let stored = try await database.groupTransaction { db in try Self.writeDelivery(row, in: db, database: database, generations: generations) }
        announce(stored)
        return stored
    }

    private func writeDelivery(_ row: PreparedInboxLine, in db: Connection) throws -> StoredDelivery {
        try Self.writeDelivery(row, in: db, database: database, generations: inboxGenerations)
    }

    /// Tells the console a line is stored, once it is committed (inside a caller's transaction, after its COMMIT).
    private func announce(_ stored: StoredDelivery) {
        let hub = consoleEvents
        guard hub.isHeard else { return }
        database.afterCommit { hub.publish(.delivery(stored.id), to: stored.audience) }
    }

    static func writeDelivery(_ row: PreparedInboxLine, in db: Connection, database: DatabasePool, generations: InboxGenerations) throws -> StoredDelivery {
        let output = row.output
        // Whose line it is: the person for `user:`, the device's owner now for `device:` (nobody's if no such device).
        let owner = row.owner(deviceOwner: row.kind == "device" ? try DeviceStore.owner(ofDevice: row.value, in: db) : nil)
        // Whose pages it changes, once committed: everyone's for `all`, else its owner's (a line for a device
        // nobody has is shown to no one).
        switch row.destination {
        case .all: database.afterCommit { generations.changedForEveryone() }
        default: if let owner { database.afterCommit { generations.changed(subject: owner) } }
        }
        try db.run("""
            INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, destination_subject, agent_id, agent_name,
                                           session_id, title, body, parts, metadata, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, row.id, row.destination.description, row.kind, row.value, owner, output.agentID, output.agentName, output.sessionID,
            output.title, output.body, row.partsJSON, row.metadataJSON, millis(row.now))
        let recipients = try recipients(of: row.destination, in: db)
        for device in recipients {
            try db.run("INSERT INTO mobile_delivery_recipients (delivery_id, device_id) VALUES (?, ?)", row.id, device.id)
        }
        // Devices with notifications off or no token still get the line; they just get no wake-up.
        let wakeable = row.wakes ? recipients.filter { $0.wakeable }.map(\.id) : []
        try SQLitePushOutbox.enqueue(.delivery(id: row.id, agentID: output.agentID), encoded: row.signal, deliveryID: row.id, deviceIDs: wakeable, now: row.now, in: db)
        // Why a phone gets no wake-up goes on its timeline, in the same transaction (the System agent's lines are never shown).
        if row.wakes {
            let skipped = recipients.filter { !$0.wakeable }.map { (deviceID: $0.id, reason: PreparedInboxLine.skipReason(notificationsOn: $0.notificationsOn)) }
            if !skipped.isEmpty { try DeliveryEventStore.appendSkipped(deliveryID: row.id, skipped: skipped, now: row.now, in: db) }
        }
        return StoredDelivery(id: row.id, recipients: recipients.map(\.id), wakeUps: wakeable.count, audience: row.audience(owner: owner))
    }

    /// A page of what `subject` may see, newest first. With `deviceID`, only that phone's lines and its read state.
    /// Each kind of destination is read backwards along its index and only `limit + 1` rows of each are
    /// looked at, so a page costs the same in an inbox of ten lines or of a million.
    public func deliveries(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) throws -> (items: [Delivery], unreadCount: Int, hasMore: Bool) {
        // One snapshot: the page and its unread count agree even while lines are being written.
        try database.readSnapshot { db in
            let (readColumn, readArgs) = Self.readState(subject: subject, deviceID: deviceID)
            let kinds = Self.lineKinds(subject: subject, deviceID: deviceID)
            let before = cursor ?? Int64.max
            let newest = kinds.map { kind in
                (sql: "SELECT seq FROM (SELECT seq FROM mobile_deliveries WHERE \(kind.sql) AND seq < ? ORDER BY seq DESC LIMIT ?)",
                 args: kind.args + [before, limit + 1])
            }
            let rows = try db.query("""
                SELECT d.*, \(readColumn) AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(newest.map(\.sql).joined(separator: " UNION ALL ")))
                ORDER BY d.seq DESC LIMIT ?
                """, arguments: readArgs + newest.flatMap(\.args) + [limit + 1])
            let items = rows.prefix(limit).map(Self.delivery)
            return (Array(items), try Self.unreadCount(subject: subject, deviceID: deviceID, in: db), rows.count > limit)
        }
    }

    /// The lines `subject` sees with a sequence above `seq`, oldest first, at most `limit` (the relay carriage
    /// sends a backlog down in order, page by page).
    public func lines(subject: String, after seq: Int64, limit: Int) throws -> [Delivery] {
        try database.readSnapshot { db in
            let (readColumn, readArgs) = Self.readState(subject: subject, deviceID: nil)
            let kinds = Self.lineKinds(subject: subject, deviceID: nil)
            let oldest = kinds.map { kind in
                (sql: "SELECT seq FROM (SELECT seq FROM mobile_deliveries WHERE \(kind.sql) AND seq > ? ORDER BY seq ASC LIMIT ?)",
                 args: kind.args + [seq, limit])
            }
            return try db.query("""
                SELECT d.*, \(readColumn) AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(oldest.map(\.sql).joined(separator: " UNION ALL ")))
                ORDER BY d.seq ASC LIMIT ?
                """, arguments: readArgs + oldest.flatMap(\.args) + [limit]).map(Self.delivery)
        }
    }

    /// Lines visible minus lines read, both read from the counts the schema's triggers keep (`mobile.12-line-counts`):
    /// a few key lookups, whatever the size of the person's history. Receipts exist only for lines their device could
    /// see, and a line's visibility to a device never changes while both exist. A person's count over all their
    /// phones still counts distinct lines read along an index.
    private static func unreadCount(subject: String, deviceID: String?, in db: Connection) throws -> Int {
        let devices = deviceID == nil
            ? (sql: "destination_value IN (SELECT id FROM mobile_devices WHERE subject = ?)", args: [subject] as [any SQLiteBindable])
            : (sql: "destination_value = ?", args: [deviceID!] as [any SQLiteBindable])
        // One primary-key lookup per kind of line.
        let visible = try db.query("""
            SELECT COALESCE((SELECT lines FROM mobile_line_counts WHERE destination_kind = 'all' AND destination_value = '' AND destination_subject = ''), 0)
                 + COALESCE((SELECT lines FROM mobile_line_counts WHERE destination_kind = 'user' AND destination_value = ? AND destination_subject = ''), 0)
                 + COALESCE((SELECT SUM(lines) FROM mobile_line_counts WHERE destination_kind = 'device' AND \(devices.sql) AND destination_subject = ?), 0) AS n
            """, arguments: [subject] + devices.args + [subject]).first?.int("n") ?? 0
        let read = try (deviceID.map {
            try db.query("SELECT receipts AS n FROM mobile_receipt_counts WHERE device_id = ?", $0)
        } ?? db.query("SELECT COUNT(DISTINCT delivery_id) AS n FROM mobile_receipts WHERE device_id IN (SELECT id FROM mobile_devices WHERE subject = ?)", subject))
            .first?.int("n") ?? 0
        return max(0, Int(visible - read))
    }

    /// One line, if `subject` may see it.
    public func delivery(id: String, subject: String, deviceID: String?) throws -> Delivery? {
        try database.read { db in try Self.delivery(id: id, subject: subject, deviceID: deviceID, in: db) }
    }

    private static func delivery(id: String, subject: String, deviceID: String?, in db: Connection) throws -> Delivery? {
        let (readColumn, readArgs) = readState(subject: subject, deviceID: deviceID)
        let kinds = lineKinds(subject: subject, deviceID: deviceID)
        return try db.query("SELECT d.*, \(readColumn) AS read_at FROM mobile_deliveries d WHERE d.id = ? AND (\(kinds.map { "(\($0.sql))" }.joined(separator: " OR ")))",
                            arguments: readArgs + [id] + kinds.flatMap(\.args)).first.map(Self.delivery)
    }

    // The one place that says who sees a line: one condition per kind of destination, each an index range
    // of mobile_deliveries_visible. The System agent is filtered here, at the boundary. (The triggers of
    // mobile.12-line-counts count lines by the same keys, for the unread count.)
    typealias LineKind = (sql: String, args: [any SQLiteBindable])

    static func lineKinds(subject: String, deviceID: String?) -> [LineKind] {
        let notSystem = "agent_id <> '\(systemAgentID)'"
        let device = deviceID == nil
            ? (sql: "destination_kind = 'device' AND destination_value IN (SELECT id FROM mobile_devices WHERE subject = ?) AND destination_subject = ? AND \(notSystem)",
               args: [subject, subject] as [any SQLiteBindable])
            : (sql: "destination_kind = 'device' AND destination_value = ? AND destination_subject = ? AND \(notSystem)",
               args: [deviceID!, subject] as [any SQLiteBindable])
        return [
            (sql: "destination_kind = 'all' AND destination_value = '' AND \(notSystem)", args: []),
            (sql: "destination_kind = 'user' AND destination_value = ? AND \(notSystem)", args: [subject]),
            device,
        ]
    }

    /// The `read_at` column of a line for one phone, or for a person (the first read on any of their phones).
    private static func readState(subject: String, deviceID: String?) -> (String, [any SQLiteBindable]) {
        if let deviceID {
            return ("(SELECT read_at FROM mobile_receipts r WHERE r.delivery_id = d.id AND r.device_id = ?)", [deviceID])
        }
        return ("(SELECT MIN(read_at) FROM mobile_receipts r WHERE r.delivery_id = d.id AND r.device_id IN (SELECT id FROM mobile_devices WHERE subject = ?))", [subject])
    }

    static func delivery(_ row: Row) -> Delivery {
        Delivery(seq: row.int("seq") ?? 0, id: row.string("id") ?? "",
                        destination: (try? Destination(parsing: row.string("destination") ?? "all")) ?? .all,
                        agentID: row.string("agent_id") ?? "", agentName: row.string("agent_name") ?? "",
                        sessionID: row.string("session_id") ?? "", title: row.string("title") ?? "", body: row.string("body") ?? "",
                        partsJSON: row.string("parts") ?? "[]", metadataJSON: row.string("metadata") ?? "{}", createdAt: date(row.int("created_at")) ?? Date(timeIntervalSince1970: 0),
                        readAt: date(row.int("read_at")))
    }

    /// Records that `deviceID` read the line (the first read time is kept). False if the line is not visible to it.
    public func markRead(deliveryID: String, deviceID: String, subject: String) throws -> Bool {
        let now = Self.millis(clock.now())
        let generations = inboxGenerations
        // Checked in the writing transaction: a receipt is never left for a device removed in between.
        return try database.transaction { db in
            guard try DeviceStore.owner(ofDevice: deviceID, in: db) == subject,
                  try Self.delivery(id: deliveryID, subject: subject, deviceID: deviceID, in: db) != nil else { return false }
            if try db.run("INSERT INTO mobile_receipts (delivery_id, device_id, read_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING", deliveryID, deviceID, now) > 0 {
                database.afterCommit { generations.changed(subject: subject) }
                // A receipt is the timeline's `read` step: the console's open line follows it, once it is committed.
                let hub = consoleEvents
                if hub.isHeard { database.afterCommit { hub.publish(.delivery(deliveryID), to: .subject(subject)) } }
            }
            return true
        }
    }
}


extension MobileStore {
    /// Queues a wake-up for every phone of `subject` that takes pushes (approvals, device commands).
    /// Returns how many were queued.
    @discardableResult
    public func queueWakeUps(_ signal: WakeSignal, subject: String) throws -> Int {
        try database.transaction { db in
            let devices = try db.query("SELECT id FROM mobile_devices WHERE subject = ? AND notifications_enabled = 1 AND push_token IS NOT NULL ORDER BY id", subject)
                .compactMap { $0.string("id") }
            try outbox.enqueue(signal, deliveryID: nil, deviceIDs: devices, now: clock.now(), in: db)
            return devices.count
        }
    }

    /// Queues a wake-up for one device, if it takes pushes.
    @discardableResult
    public func queueWakeUp(_ signal: WakeSignal, deviceID: String) throws -> Bool {
        try database.transaction { db in
            guard try !db.query("SELECT 1 FROM mobile_devices WHERE id = ? AND notifications_enabled = 1 AND push_token IS NOT NULL", deviceID).isEmpty else { return false }
            try outbox.enqueue(signal, deliveryID: nil, deviceIDs: [deviceID], now: clock.now(), in: db)
            return true
        }
    }
}

/// How often each person's inbox has changed in this process: what a cached page of it is checked against. A page
/// rendered at `generation(of:)` is current while that value stays the same. Each write bumps the people whose
/// pages it changes (a line for `all` bumps everyone) after its commit, so a reader that sees the new value also
/// sees the new rows; a page rendered from a read that began before the bump is stored under the old value and
/// never served. Like `DatabasePool.changeGeneration`, it assumes this process is the only writer of the file.
public final class InboxGenerations: Sendable {
    private let state = Mutex<(everyone: UInt64, subjects: [String: UInt64])>((0, [:]))

    public init() {}

    /// Grows whenever what `subject`'s inbox shows may have changed (a sum of two counters that only grow).
    public func generation(of subject: String) -> UInt64 {
        state.withLock { $0.everyone &+ ($0.subjects[subject] ?? 0) }
    }

    /// A committed change to one person's inbox: their lines, read receipts or devices.
    public func changed(subject: String) {
        state.withLock { $0.subjects[subject, default: 0] &+= 1 }
    }

    /// A committed change everyone's inbox shows (a line for `all`).
    public func changedForEveryone() {
        state.withLock { $0.everyone &+= 1 }
    }
}

/// A device a request names that the caller may not use: none named, or unknown, or someone else's (never told apart).
public enum DeviceError: Error, Equatable, CustomStringConvertible {
    case missing(field: String)
    case notYours(String, field: String)

    public var description: String {
        switch self {
        case .missing(let field): "\(field) is required"
        case .notYours(let id, let field): "device is not registered to this user (\(field): \(id))"
        }
    }
}

/// The mobile channel's side of `DeviceAlerts`: wake-ups queued in the outbox (on any engine), and the dispatcher
/// told once they are committed.
public struct MobileDeviceAlerts: DeviceAlerts {
    public let inbox: any Inbox
    public let transactions: any TransactionalStorage
    public let dispatcher: PushDispatcher?

    public init(storage: MobileStorage, dispatcher: PushDispatcher?) {
        inbox = storage.inbox
        transactions = storage.transactions
        self.dispatcher = dispatcher
    }

    /// Committed when it returns: the dispatcher is told at once.
    public func alert(_ signal: WakeSignal, deviceID: String) async throws -> Bool {
        let queued = try await inbox.queueWakeUp(signal, deviceID: deviceID)
        if queued { dispatcher?.poke() }
        return queued
    }

    public func alert(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int {
        let queued = try inbox.queueWakeUps(signal, subject: subject, in: session)
        if queued > 0, let dispatcher { transactions.afterCommit { dispatcher.poke() } }
        return queued
    }
}
