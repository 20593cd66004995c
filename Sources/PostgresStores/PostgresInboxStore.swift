import ChannelAPI
import Foundation
import Mobile
import PostgreSQL
import Storage
import Synchronization

/// The inbox on PostgreSQL, shared by every node of a gateway: each line is written whole with its recipients, its
/// wake-ups (`PostgresPushOutbox`) and its timeline's `skipped` steps in one transaction, as SQLite writes it.
///
/// Sequence order is commit order for each person: a line takes a lock on its person (an exclusive one on everyone
/// for a line to `all`) before it draws its sequence number and holds it until its commit, so a feed that reads a
/// person's lines after the last `seq` it saw (the relay carriage) never skips a line that committed late with a
/// lower number. Lines for different people are written in parallel.
///
/// Each write, once committed, is announced with a NOTIFY naming the person whose pages it changes (`*` for
/// everyone; sent by `PostgresAnnouncer`, batched, outside the writing transaction); `followOtherWriters()` turns
/// other nodes' notifications into bumps of this node's `InboxGenerations`, so no node keeps serving a page cached
/// before another node's write. After a lost listening connection, or when any connection to the database has
/// closed (a node that died may not have announced its last writes), every page is stale within `pollInterval`;
/// with no listener (`listenURL` nil, behind a pooler that breaks LISTEN) every page is stale after `pollInterval`.
public final class PostgresInbox: Inbox, DeviceRegistry {
    /// The NOTIFY channel inbox writes are announced on.
    public static let channel = "soulacy_inbox"
    /// A person's name longer than this is announced as `*` (everyone), keeping NOTIFY payloads tiny.
    static let longestAnnouncedSubject = 200

    let pool: PostgresPool
    let outbox: PostgresPushOutbox
    let clock: any WallClock
    let listenURL: String?
    let pollInterval: Duration
    public let inboxGenerations: InboxGenerations
    /// The console's live updates on this node.
    public let consoleEvents: ConsoleEventHub
    /// Sends this node's NOTIFYs once their writes have committed.
    let announcer: PostgresAnnouncer
    private let following = FollowState()

    public init(pool: PostgresPool, listenURL: String?, clock: any WallClock = SystemWallClock(), pollInterval: Duration = .milliseconds(1500),
                inboxGenerations: InboxGenerations = InboxGenerations(), consoleEvents: ConsoleEventHub = ConsoleEventHub()) {
        self.pool = pool
        outbox = PostgresPushOutbox(pool: pool)
        announcer = PostgresAnnouncer(pool: pool, channel: Self.channel)
        self.clock = clock
        self.listenURL = listenURL
        self.pollInterval = pollInterval
        self.inboxGenerations = inboxGenerations
        self.consoleEvents = consoleEvents
    }

    deinit { stopFollowing() }

    // MARK: Lines

    public func insertDelivery(_ output: Output, destination: Destination) async throws -> StoredDelivery {
        let line = try PreparedInboxLine(output, destination: destination, now: clock.now())
        return try await pool.transaction { db in try write(line, in: db) }
    }

    public func insertDelivery(_ output: Output, destination: Destination, in session: any StorageSession) throws -> StoredDelivery {
        try write(try PreparedInboxLine(output, destination: destination, now: clock.now()), in: try session.postgresConnection())
    }

    private func write(_ line: PreparedInboxLine, in db: PostgresConnection) throws -> StoredDelivery {
        let output = line.output
        let hub = consoleEvents
        let deviceOwner = line.kind == "device" ? try Self.owner(ofDevice: line.value, in: db) : nil
        let owner = line.owner(deviceOwner: deviceOwner)
        try Self.lockFeed(of: line.kind == "all" ? nil : owner, everyone: line.kind == "all", in: db)
        // The line, its recipients and their `skipped` steps in one statement (one round trip, not one per row);
        // the recipients come back for the answer and the wake-ups.
        let recipients = try db.query("""
            WITH line AS (
                INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, destination_subject, agent_id, agent_name,
                                               session_id, title, body, parts, metadata, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)),
            recipient AS (\(Self.recipientQuery(kind: line.kind, value: "$4"))),
            listed AS (INSERT INTO mobile_delivery_recipients (delivery_id, device_id) SELECT $1, id FROM recipient),
            skipped AS (
                INSERT INTO mobile_delivery_events (delivery_id, device_id, kind, at, reason)
                SELECT $1, id, 'skipped', $13, CASE WHEN notifications_on THEN $15 ELSE $16 END FROM recipient
                WHERE $14 AND NOT wakeable ORDER BY id)
            SELECT * FROM recipient ORDER BY id
            """, line.id, line.destination.description, line.kind, line.value, owner, output.agentID, Self.text(output.agentName),
            Self.text(output.sessionID), Self.text(output.title), Self.text(output.body), line.partsJSON, line.metadataJSON, line.now.postgresMillis,
            line.wakes, PreparedInboxLine.skipReason(notificationsOn: true), PreparedInboxLine.skipReason(notificationsOn: false))
            .compactMap { row in row.string("id").map { (id: $0, wakeable: row.bool("wakeable") ?? false) } }
        let wakeable = line.wakes ? recipients.filter(\.wakeable).map(\.id) : []
        try outbox.enqueue(.delivery(id: line.id, agentID: output.agentID), deliveryID: line.id, deviceIDs: wakeable, now: line.now, in: db)
        // A line for a device nobody owns is shown to no one: no page changes.
        if line.kind == "all" {
            announce(everyone: true, subject: nil, in: db)
        } else if let owner {
            announce(everyone: false, subject: owner, in: db)
        }
        let stored = StoredDelivery(id: line.id, recipients: recipients.map(\.id), wakeUps: wakeable.count, audience: line.audience(owner: owner))
        if hub.isHeard { db.afterCommit { hub.publish(.delivery(stored.id), to: stored.audience) } }
        return stored
    }

    public func deliveries(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) async throws -> InboxPage {
        let limit = max(0, limit)
        // One snapshot: the page and its unread count agree even while lines are being written.
        return try await pool.transaction(isolation: .repeatableRead) { db in
            var query = Parameters()
            let read = Self.readState(subject: subject, deviceID: deviceID, &query)
            let kinds = Self.lineKinds(subject: subject, deviceID: deviceID, &query)
            let before = query.add(cursor ?? Int64.max), take = query.add(limit + 1)
            let newest = kinds.map { "(SELECT seq FROM mobile_deliveries WHERE \($0) AND seq < \(before) ORDER BY seq DESC LIMIT \(take))" }
            let rows = try db.query("""
                SELECT d.*, \(read) AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(newest.joined(separator: " UNION ALL ")))
                ORDER BY d.seq DESC LIMIT \(take)
                """, arguments: query.values)
            let items = rows.prefix(limit).map(Self.delivery)
            return InboxPage(items: Array(items), unreadCount: try Self.unreadCount(subject: subject, deviceID: deviceID, in: db), hasMore: rows.count > limit)
        }
    }

    public func lines(subject: String, after seq: Int64, limit: Int) async throws -> [Delivery] {
        try await pool.withConnection { db in
            var query = Parameters()
            let read = Self.readState(subject: subject, deviceID: nil, &query)
            let kinds = Self.lineKinds(subject: subject, deviceID: nil, &query)
            let after = query.add(seq), take = query.add(max(0, limit))
            let oldest = kinds.map { "(SELECT seq FROM mobile_deliveries WHERE \($0) AND seq > \(after) ORDER BY seq ASC LIMIT \(take))" }
            return try db.query("""
                SELECT d.*, \(read) AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(oldest.joined(separator: " UNION ALL ")))
                ORDER BY d.seq ASC LIMIT \(take)
                """, arguments: query.values).map(Self.delivery)
        }
    }

    public func delivery(id: String, subject: String, deviceID: String?) async throws -> Delivery? {
        try await pool.withConnection { db in try Self.delivery(id: id, subject: subject, deviceID: deviceID, in: db) }
    }

    public func markRead(deliveryID: String, deviceID: String, subject: String) async throws -> Bool {
        try await pool.transaction { db in try markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject, in: db) }
    }

    public func markRead(deliveryID: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Bool {
        try markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject, in: try session.postgresConnection())
    }

    /// Checked in the writing transaction, under the device's row lock: a receipt is never left for a device removed
    /// in between.
    private func markRead(deliveryID: String, deviceID: String, subject: String, in db: PostgresConnection) throws -> Bool {
        let now = clock.now().postgresMillis
        let hub = consoleEvents
        guard try db.query("SELECT subject FROM mobile_devices WHERE id = $1 FOR SHARE", deviceID).first?.string("subject") == subject,
              try Self.delivery(id: deliveryID, subject: subject, deviceID: deviceID, in: db) != nil else { return false }
        if try db.run("INSERT INTO mobile_receipts (delivery_id, device_id, read_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                      deliveryID, deviceID, now) > 0 {
            announce(everyone: false, subject: subject, in: db)
            if hub.isHeard { db.afterCommit { hub.publish(.delivery(deliveryID), to: .subject(subject)) } }
        }
        return true
    }

    /// Waits for every line being written now (each holds the feed lock in share mode), then reads the newest.
    public func latestDeliverySeq() async throws -> Int64 {
        try await pool.transaction { db in
            try Self.lockFeed(of: nil, everyone: true, in: db)
            return try db.query("SELECT COALESCE(MAX(seq), 0) AS s FROM mobile_deliveries").first?.int("s") ?? 0
        }
    }

    public func queueWakeUps(_ signal: WakeSignal, subject: String) async throws -> Int {
        try await pool.transaction { db in try queueWakeUps(signal, subject: subject, in: db) }
    }

    public func queueWakeUps(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int {
        try queueWakeUps(signal, subject: subject, in: try session.postgresConnection())
    }

    private func queueWakeUps(_ signal: WakeSignal, subject: String, in db: PostgresConnection) throws -> Int {
        let devices = try db.query("""
            SELECT id FROM mobile_devices WHERE subject = $1 AND notifications_enabled AND push_token IS NOT NULL ORDER BY id
            """, subject).compactMap { $0.string("id") }
        try outbox.enqueue(signal, deliveryID: nil, deviceIDs: devices, now: clock.now(), in: db)
        return devices.count
    }

    public func consoleLines(subject: String, agentID: String?, idPrefix: String?, before: Int64?, limit: Int) async throws -> [Delivery] {
        try await pool.withConnection { db in
            var query = Parameters()
            let kinds = Self.lineKinds(subject: subject, deviceID: nil, &query)
            let cursor = query.add(before ?? Int64.max), take = query.add(max(0, limit))
            var extra = ""
            if let agentID { extra += " AND agent_id = \(query.add(agentID))" }
            if let idPrefix {
                // Byte-wise, whatever the database's collation (ids are ASCII): every id that starts with the prefix
                // sorts between it and it followed by U+10FFFF, along mobile_deliveries_id_pattern.
                extra += " AND id ~>=~ \(query.add(idPrefix)) AND id ~<~ \(query.add(idPrefix + "\u{10FFFF}"))"
            }
            if idPrefix != nil {
                return try db.query("""
                    SELECT d.*, NULL::BIGINT AS read_at FROM mobile_deliveries d
                    WHERE (\(kinds.map { "(\($0))" }.joined(separator: " OR "))) AND seq < \(cursor)\(extra)
                    ORDER BY seq DESC LIMIT \(take)
                    """, arguments: query.values).map(Self.delivery)
            }
            // As the inbox reads a page: each kind of destination backwards along its index, `limit` of each at most.
            let newest = kinds.map { "(SELECT seq FROM mobile_deliveries WHERE \($0) AND seq < \(cursor)\(extra) ORDER BY seq DESC LIMIT \(take))" }
            return try db.query("""
                SELECT d.*, NULL::BIGINT AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(newest.joined(separator: " UNION ALL ")))
                ORDER BY d.seq DESC LIMIT \(take)
                """, arguments: query.values).map(Self.delivery)
        }
    }

    public func queueWakeUp(_ signal: WakeSignal, deviceID: String) async throws -> Bool {
        try await pool.transaction { db in try queueWakeUp(signal, deviceID: deviceID, in: db) }
    }

    public func queueWakeUp(_ signal: WakeSignal, deviceID: String, in session: any StorageSession) throws -> Bool {
        try queueWakeUp(signal, deviceID: deviceID, in: try session.postgresConnection())
    }

    private func queueWakeUp(_ signal: WakeSignal, deviceID: String, in db: PostgresConnection) throws -> Bool {
        guard try !db.query("SELECT 1 FROM mobile_devices WHERE id = $1 AND notifications_enabled AND push_token IS NOT NULL", deviceID).isEmpty else {
            return false
        }
        try outbox.enqueue(signal, deliveryID: nil, deviceIDs: [deviceID], now: clock.now(), in: db)
        return true
    }

    // MARK: Devices

    public func register(_ registration: DeviceRegistration, subject: String, keyID: String?) async throws -> Bool {
        try await pool.transaction { db in try register(registration, subject: subject, keyID: keyID, in: db) }
    }

    public func register(_ registration: DeviceRegistration, subject: String, keyID: String?, in session: any StorageSession) throws -> Bool {
        try register(registration, subject: subject, keyID: keyID, in: try session.postgresConnection())
    }

    private func register(_ registration: DeviceRegistration, subject: String, keyID: String?, in db: PostgresConnection) throws -> Bool {
        let now = clock.now().postgresMillis
        let capabilities = String(decoding: try JSONEncoder().encode(registration.capabilities.sorted()), as: UTF8.self)
        // A new id's insert, or the existing row locked: a racing registration of the same id by someone else
        // waits here and then sees the owner.
        let inserted = try db.run("""
            INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, push_token, push_environment, notifications_enabled,
                                        live_start_token, created_at, updated_at, registered_by_key, capabilities)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12) ON CONFLICT (id) DO NOTHING
            """, registration.id, subject, registration.name, registration.platform.rawValue, registration.bundleID,
            registration.pushToken, registration.pushEnvironment?.rawValue, registration.notificationsEnabled, registration.liveStartToken,
            now, keyID, capabilities) > 0
        if !inserted {
            guard try db.query("SELECT subject FROM mobile_devices WHERE id = $1 FOR UPDATE", registration.id).first?.string("subject") == subject else {
                throw DeviceOwnershipError.ownedByAnotherSubject
            }
            try db.run("""
                UPDATE mobile_devices SET name = $2, platform = $3, bundle_id = $4, push_token = $5, push_environment = $6,
                    notifications_enabled = $7,
                    live_start_token = CASE WHEN $3 = 'ios' THEN COALESCE($8, live_start_token) END,
                    updated_at = $9, registered_by_key = $10, capabilities = $11
                WHERE id = $1
                """, registration.id, registration.name, registration.platform.rawValue, registration.bundleID, registration.pushToken,
                registration.pushEnvironment?.rawValue, registration.notificationsEnabled, registration.liveStartToken, now, keyID, capabilities)
        }
        announce(everyone: false, subject: subject, in: db)
        return inserted
    }

    public func device(id: String) async throws -> Device? {
        try await pool.withConnection { db in try db.query("SELECT * FROM mobile_devices WHERE id = $1", id).first.map(Self.device) }
    }

    public func list(subject: String) async throws -> [Device] {
        try await pool.withConnection { db in
            try db.query("SELECT * FROM mobile_devices WHERE subject = $1 ORDER BY created_at, id", subject).map(Self.device)
        }
    }

    public func allDevices() async throws -> [Device] {
        try await pool.withConnection { db in try db.query("SELECT * FROM mobile_devices ORDER BY created_at, id").map(Self.device) }
    }

    public func deleteDevice(id: String, subject: String) async throws -> Bool {
        try await pool.transaction { db in try deleteDevice(id: id, subject: subject, in: db) }
    }

    public func deleteDevice(id: String, subject: String, in session: any StorageSession) throws -> Bool {
        try deleteDevice(id: id, subject: subject, in: try session.postgresConnection())
    }

    private func deleteDevice(id: String, subject: String, in db: PostgresConnection) throws -> Bool {
        // Its node goes too, and what was waiting for it expires (as on SQLite, whether or not the device row was there).
        try db.run("""
            UPDATE mobile_node_commands SET status = 'expired', error = $1, completed_at = $2
            WHERE device_id = $3 AND subject = $4 AND status IN ('queued', 'running')
            """, Array("device registration removed".utf8), clock.now().postgresMillis, id, subject)
        try db.run("DELETE FROM mobile_nodes WHERE device_id = $1 AND subject = $2", id, subject)
        guard try db.run("DELETE FROM mobile_devices WHERE id = $1 AND subject = $2", id, subject) > 0 else { return false }
        try db.run("DELETE FROM mobile_receipts WHERE device_id = $1", id)
        announce(everyone: false, subject: subject, in: db)
        return true
    }

    public func removeDevices(registeredByKey keyID: String) async throws -> Int {
        try await pool.transaction { db in try removeDevices(registeredByKey: keyID, in: db) }
    }

    public func removeDevices(registeredByKey keyID: String, in session: any StorageSession) throws -> Int {
        try removeDevices(registeredByKey: keyID, in: try session.postgresConnection())
    }

    private func removeDevices(registeredByKey keyID: String, in db: PostgresConnection) throws -> Int {
        let removed = try db.query("DELETE FROM mobile_devices WHERE registered_by_key = $1 RETURNING id, subject", keyID)
        for row in removed { try db.run("DELETE FROM mobile_receipts WHERE device_id = $1", row.string("id") ?? "") }
        for owner in Set(removed.compactMap { $0.string("subject") }) {
            announce(everyone: false, subject: owner, in: db)
        }
        return removed.count
    }

    // MARK: Other nodes' writes

    public func followOtherWriters() async throws {
        let generations = inboxGenerations
        guard let listenURL else {
            let interval = pollInterval
            following.replace(Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    generations.changedForEveryone()
                }
            }, listener: nil)
            return
        }
        let listener = try await PostgresListener.start(url: listenURL, channels: [Self.channel], applicationName: "soulacy-inbox")
        let pool = pool, interval = pollInterval
        let open = (try? await Self.connections(in: pool)) ?? []
        following.replace(Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await event in listener.events {
                        switch event {
                        case .notification(let note) where note.payload == "*": generations.changedForEveryone()
                        case .notification(let note): generations.changed(subject: note.payload)
                        case .reconnected: generations.changedForEveryone()
                        }
                    }
                }
                // A node announces its writes after they commit; one that died in between never will. Its
                // connections close with it, so a connection to the database gone since the last look makes every
                // page stale (a pool reconnecting or a psql session ending costs a few cache misses, nothing more).
                group.addTask {
                    var connections = open
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        guard let now = try? await Self.connections(in: pool) else {
                            generations.changedForEveryone()
                            continue
                        }
                        if !connections.isSubset(of: now) { generations.changedForEveryone() }
                        connections = now
                    }
                }
                await group.waitForAll()
            }
        }, listener: listener)
    }

    /// The server processes of the connections to this database now.
    static func connections(in pool: PostgresPool) async throws -> Set<Int64> {
        try await pool.withConnection { db in
            Set(try db.query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'")
                .compactMap { $0.int("pid") })
        }
    }

    public func stopFollowing() {
        following.replace(nil, listener: nil)
    }

    // MARK: SQL

    /// Text a person wrote or an agent produced, bound as bytes: PostgreSQL's text cannot hold NUL, and a line
    /// is stored whole whatever it holds (read back, the bytes are the same string).
    static func text(_ value: String) -> [UInt8] { Array(value.utf8) }

    /// A line's place in the feeds: share mode on everyone and exclusive on its person, or exclusive on everyone
    /// (a line to `all`, and a reader that wants every line in flight committed first). Held until commit.
    static func lockFeed(of subject: String?, everyone: Bool, in db: PostgresConnection) throws {
        if everyone {
            _ = try db.query("SELECT pg_advisory_xact_lock(hashtext('mobile_inbox_feed'), 0)")
        } else if let subject {
            // Both in one round trip (no order between them can deadlock: the only exclusive feed lock is taken
            // alone).
            _ = try db.query("""
                SELECT pg_advisory_xact_lock_shared(hashtext('mobile_inbox_feed'), 0), pg_advisory_xact_lock(hashtext('mobile_inbox_person'), hashtext($1::text))
                """, subject)
        } else {
            _ = try db.query("SELECT pg_advisory_xact_lock_shared(hashtext('mobile_inbox_feed'), 0)")
        }
    }

    /// Once the write commits: bumps this node's generation, and tells the other nodes through `announcer` (after
    /// the commit, not inside it, so writers do not queue on PostgreSQL's notification lock).
    func announce(everyone: Bool, subject: String?, in db: PostgresConnection) {
        let generations = inboxGenerations, announcer = announcer
        guard !everyone, let subject else {
            db.afterCommit {
                generations.changedForEveryone()
                announcer.announce("*")
            }
            return
        }
        let payload = subject.utf8.count <= Self.longestAnnouncedSubject && subject != "*" && !subject.contains("\n") ? subject : "*"
        db.afterCommit {
            generations.changed(subject: subject)
            announcer.announce(payload)
        }
    }

    static func owner(ofDevice id: String, in db: PostgresConnection) throws -> String? {
        try db.query("SELECT subject FROM mobile_devices WHERE id = $1", id).first?.string("subject")
    }

    /// The devices a line to `kind` reaches, with whether each can be woken: `value` is the SQL (a parameter) naming
    /// the person or device.
    static func recipientQuery(kind: String, value: String) -> String {
        let columns = """
            SELECT id, notifications_enabled AND push_token IS NOT NULL AS wakeable, notifications_enabled AS notifications_on FROM mobile_devices
            """
        return switch kind {
        case "all": columns
        case "user": "\(columns) WHERE subject = \(value)"
        default: "\(columns) WHERE id = \(value)"
        }
    }

    /// Positional parameters for a statement built from parts.
    struct Parameters {
        var values: [any PostgresBindable] = []
        mutating func add(_ value: any PostgresBindable) -> String {
            values.append(value)
            return "$\(values.count)"
        }
    }

    /// Who sees a line, one condition per kind of destination, as SQLite's `MobileStore.lineKinds`: each an index
    /// range of `mobile_deliveries_visible`. The System agent's lines are kept and never shown.
    static func lineKinds(subject: String, deviceID: String?, _ query: inout Parameters) -> [String] {
        let notSystem = "agent_id <> '\(MobileStore.systemAgentID)'"
        let person = query.add(subject)
        let device = if let deviceID {
            "destination_kind = 'device' AND destination_value = \(query.add(deviceID)) AND destination_subject = \(person) AND \(notSystem)"
        } else {
            "destination_kind = 'device' AND destination_value IN (SELECT id FROM mobile_devices WHERE subject = \(person)) AND destination_subject = \(person) AND \(notSystem)"
        }
        return [
            "destination_kind = 'all' AND destination_value = '' AND \(notSystem)",
            "destination_kind = 'user' AND destination_value = \(person) AND \(notSystem)",
            device,
        ]
    }

    /// The `read_at` of a line for one phone, or for a person (the first read on any of their phones).
    static func readState(subject: String, deviceID: String?, _ query: inout Parameters) -> String {
        if let deviceID {
            return "(SELECT read_at FROM mobile_receipts r WHERE r.delivery_id = d.id AND r.device_id = \(query.add(deviceID)))"
        }
        return """
            (SELECT MIN(read_at) FROM mobile_receipts r WHERE r.delivery_id = d.id
             AND r.device_id IN (SELECT id FROM mobile_devices WHERE subject = \(query.add(subject))))
            """
    }

    /// Lines visible minus lines read (receipts exist only for lines their device could see).
    static func unreadCount(subject: String, deviceID: String?, in db: PostgresConnection) throws -> Int {
        var query = Parameters()
        let kinds = lineKinds(subject: subject, deviceID: deviceID, &query)
        let visible = try db.query("SELECT " + kinds.map { "(SELECT COUNT(*) FROM mobile_deliveries WHERE \($0))" }.joined(separator: " + ") + " AS n",
                                   arguments: query.values).first?.int("n") ?? 0
        let read = try (deviceID.map { try db.query("SELECT COUNT(*) AS n FROM mobile_receipts WHERE device_id = $1", $0) }
            ?? db.query("""
                SELECT COUNT(DISTINCT delivery_id) AS n FROM mobile_receipts WHERE device_id IN (SELECT id FROM mobile_devices WHERE subject = $1)
                """, subject)).first?.int("n") ?? 0
        return max(0, Int(visible - read))
    }

    static func delivery(id: String, subject: String, deviceID: String?, in db: PostgresConnection) throws -> Delivery? {
        var query = Parameters()
        let read = readState(subject: subject, deviceID: deviceID, &query)
        let kinds = lineKinds(subject: subject, deviceID: deviceID, &query)
        let line = query.add(id)
        return try db.query("SELECT d.*, \(read) AS read_at FROM mobile_deliveries d WHERE d.id = \(line) AND (\(kinds.map { "(\($0))" }.joined(separator: " OR ")))",
                            arguments: query.values).first.map(Self.delivery)
    }

    static func delivery(_ row: PostgresRow) -> Delivery {
        Delivery(seq: row.int("seq") ?? 0, id: row.string("id") ?? "",
                 destination: (try? Destination(parsing: row.string("destination") ?? "all")) ?? .all,
                 agentID: row.string("agent_id") ?? "", agentName: row.string("agent_name") ?? "", sessionID: row.string("session_id") ?? "",
                 title: row.string("title") ?? "", body: row.string("body") ?? "", partsJSON: row.string("parts") ?? "[]",
                 metadataJSON: row.string("metadata") ?? "{}", createdAt: Date(postgresMillis: row.int("created_at") ?? 0),
                 readAt: row.int("read_at").map(Date.init(postgresMillis:)))
    }

    static func device(_ row: PostgresRow) -> Device {
        Device(id: row.string("id") ?? "", subject: row.string("subject") ?? "", name: row.string("name") ?? "",
               platform: WakeTarget.Platform(rawValue: row.string("platform") ?? "") ?? .ios, bundleID: row.string("bundle_id") ?? "",
               pushToken: row.string("push_token"), pushEnvironment: row.string("push_environment").flatMap(WakeTarget.Environment.init(rawValue:)),
               notificationsEnabled: row.bool("notifications_enabled") ?? true, liveStartToken: row.string("live_start_token"),
               capabilities: Set((try? JSONDecoder().decode([String].self, from: Data((row.string("capabilities") ?? "[]").utf8))) ?? []),
               createdAt: Date(postgresMillis: row.int("created_at") ?? 0), updatedAt: Date(postgresMillis: row.int("updated_at") ?? 0))
    }
}

/// The task (and listener) that follows other nodes' writes; replacing it stops the old one.
private final class FollowState: Sendable {
    private let state = Mutex<(task: Task<Void, Never>?, listener: PostgresListener?)>((nil, nil))

    func replace(_ task: Task<Void, Never>?, listener: PostgresListener?) {
        let old = state.withLock { state in
            defer { state = (task, listener) }
            return state
        }
        old.listener?.stop()
        old.task?.cancel()
    }
}
