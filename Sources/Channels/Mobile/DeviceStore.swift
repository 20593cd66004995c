import Storage
import ChannelAPI
import Crypto
import Foundation
import JSON
import SQLite

/// The devices aggregate in SQLite: registrations, who owns which phone, and removal (a removed phone's read
/// receipts and node commands go with it).
public struct DeviceStore: Sendable {
    public let database: DatabasePool
    /// The engine seam's view of the same database: what routes build their answers in.
    public var transactions: any TransactionalStorage { database }
    let clock: any WallClock
    /// Bumped for a device's owner when it is registered, changed or removed: the person's inbox pages name their devices.
    let inboxGenerations: InboxGenerations

    public init(database: DatabasePool, clock: any WallClock = SystemWallClock(), inboxGenerations: InboxGenerations = InboxGenerations()) {
        self.database = database
        self.clock = clock
        self.inboxGenerations = inboxGenerations
    }

    /// Stores a registration; returns true when the device is new. A device id owned by someone else is refused.
    @discardableResult
    public func register(_ registration: DeviceRegistration, subject: String, keyID: String? = nil) throws -> Bool {
        let now = clock.now().sqliteMillis
        let generations = inboxGenerations
        return try database.transaction { db in
            let existing = try db.query("SELECT subject FROM mobile_devices WHERE id = ?", registration.id)
            if let owner = existing.first?.string("subject"), owner != subject {
                throw DeviceOwnershipError.ownedByAnotherSubject
            }
            database.afterCommit { generations.changed(subject: subject) }
            try db.run("""
                INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, push_token, push_environment,
                                            notifications_enabled, live_start_token, created_at, updated_at, registered_by_key, capabilities)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET
                    name = excluded.name, platform = excluded.platform, bundle_id = excluded.bundle_id,
                    push_token = excluded.push_token, push_environment = excluded.push_environment,
                    notifications_enabled = excluded.notifications_enabled,
                    live_start_token = CASE WHEN excluded.platform = 'ios' THEN COALESCE(excluded.live_start_token, mobile_devices.live_start_token) END,
                    updated_at = excluded.updated_at, registered_by_key = excluded.registered_by_key,
                    capabilities = excluded.capabilities
                """, registration.id, subject, registration.name, registration.platform.rawValue, registration.bundleID,
                registration.pushToken, registration.pushEnvironment?.rawValue, registration.notificationsEnabled,
                registration.liveStartToken, now, now, keyID,
                String(decoding: try JSONEncoder().encode(registration.capabilities.sorted()), as: UTF8.self))
            return existing.isEmpty
        }
    }

    private static func device(_ row: Row) -> Device {
        Device(id: row.string("id") ?? "", subject: row.string("subject") ?? "", name: row.string("name") ?? "",
               platform: WakeTarget.Platform(rawValue: row.string("platform") ?? "") ?? .ios,
               bundleID: row.string("bundle_id") ?? "", pushToken: row.string("push_token"),
               pushEnvironment: row.string("push_environment").flatMap(WakeTarget.Environment.init(rawValue:)),
               notificationsEnabled: row.bool("notifications_enabled") ?? true, liveStartToken: row.string("live_start_token"),
               capabilities: Set((try? JSONCoding.decode([String].self, from: Data((row.string("capabilities") ?? "[]").utf8))) ?? []),
               createdAt: row.int("created_at").map(Date.init(sqliteMillis:)) ?? Date(timeIntervalSince1970: 0),
               updatedAt: row.int("updated_at").map(Date.init(sqliteMillis:)) ?? Date(timeIntervalSince1970: 0))
    }

    public func device(id: String) throws -> Device? {
        try database.read { db in try db.query("SELECT * FROM mobile_devices WHERE id = ?", id).first.map(Self.device) }
    }

    /// The caller's own device named by a request field. A missing id, an unknown one and someone else's are
    /// refused alike, naming the field, so one person cannot learn of another's devices.
    public func ownedDevice(_ id: String?, subject: String, field: String = "device_id") throws -> Device {
        guard let id, !id.isEmpty else { throw DeviceError.missing(field: field) }
        guard let device = try device(id: id), device.subject == subject else { throw DeviceError.notYours(id, field: field) }
        return device
    }

    /// The same check without loading the device (the inbox asks it on every uncached page).
    public func checkOwnership(of id: String, subject: String, field: String = "device_id") throws {
        guard !id.isEmpty else { throw DeviceError.missing(field: field) }
        guard try database.read({ try Self.owner(ofDevice: id, in: $0) }) == subject else { throw DeviceError.notYours(id, field: field) }
    }

    /// Whose device `id` is now; nil when no device has that id.
    static func owner(ofDevice id: String, in db: Connection) throws -> String? {
        try db.query("SELECT subject FROM mobile_devices WHERE id = ?", id).first?.string("subject")
    }


    public func list(subject: String) throws -> [Device] {
        try database.read { db in try db.query("SELECT * FROM mobile_devices WHERE subject = ? ORDER BY created_at, id", subject).map(Self.device) }
    }

    public func allDevices() throws -> [Device] {
        try database.read { db in try db.query("SELECT * FROM mobile_devices ORDER BY created_at, id").map(Self.device) }
    }

    /// Removes a device; false when it does not exist or is someone else's.
    public func deleteDevice(id: String, subject: String) throws -> Bool {
        let generations = inboxGenerations
        return try database.transaction { db in
            let removed = try db.run("DELETE FROM mobile_devices WHERE id = ? AND subject = ?", id, subject) > 0
            if removed {
                try Self.forgetReceipts(ofRemovedDevices: db)
                database.afterCommit { generations.changed(subject: subject) }
            }
            // Its node goes too, and what was waiting for it expires (the node tables exist once DeviceNodes opened them).
            if try !db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'mobile_node_commands'").isEmpty {
                try db.run("""
                    UPDATE mobile_node_commands SET status = 'expired', error = 'device registration removed', completed_at = ?
                    WHERE device_id = ? AND subject = ? AND status IN ('queued', 'running')
                    """, clock.now().sqliteMillis, id, subject)
                try db.run("DELETE FROM mobile_nodes WHERE device_id = ? AND subject = ?", id, subject)
            }
            return removed
        }
    }

    /// Unpairs the phones a revoked key registered: they get no more wake-ups and drop out of `all`.
    @discardableResult
    public func removeDevices(registeredByKey keyID: String) throws -> Int {
        let generations = inboxGenerations
        return try database.transaction { db in
            let owners = try db.query("SELECT DISTINCT subject FROM mobile_devices WHERE registered_by_key = ?", keyID).compactMap { $0.string("subject") }
            let removed = try db.run("DELETE FROM mobile_devices WHERE registered_by_key = ?", keyID)
            if removed > 0 {
                try Self.forgetReceipts(ofRemovedDevices: db)
                database.afterCommit { for owner in owners { generations.changed(subject: owner) } }
            }
            return removed
        }
    }

    /// A removed device's read receipts go with it (whoever registers its id next starts unread).
    private static func forgetReceipts(ofRemovedDevices db: Connection) throws {
        try db.run("DELETE FROM mobile_receipts WHERE device_id NOT IN (SELECT id FROM mobile_devices)")
    }
}
