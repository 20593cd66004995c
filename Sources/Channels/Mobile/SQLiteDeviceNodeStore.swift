import Foundation
import JSON
import SQLite
import Storage

/// Nodes and their command queue in the data directory's SQLite file (`mobile_nodes`, `mobile_node_commands`:
/// `MobileSchema` 8 and 9). Writes join the caller's transaction; reads run on SQLite's own threads.
public struct SQLiteDeviceNodeStore: DeviceNodeStore {
    public let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    public var transactions: any TransactionalStorage { database }

    static func node(_ row: Row) -> DeviceNodes.Node {
        DeviceNodes.Node(deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "", name: row.string("name") ?? "",
                         platform: row.string("platform") ?? "ios", model: row.string("model") ?? "", osVersion: row.string("os_version") ?? "",
                         appVersion: row.string("app_version") ?? "", capabilities: DeviceNodes.Node.capabilities(stored: row.string("capabilities")),
                         permissions: DeviceNodes.Node.permissions(stored: row.string("permissions")),
                         updatedAt: row.date("updated_at") ?? Date(sqliteMillis: 0))
    }

    static func command(_ row: Row) -> DeviceNodes.Command {
        DeviceNodes.Command(id: row.string("id") ?? "", deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "",
                            command: row.string("command") ?? "", params: DeviceNodes.Command.params(stored: row.string("params")),
                            status: DeviceNodes.CommandStatus(rawValue: row.string("status") ?? "queued"),
                            result: DeviceNodes.Command.result(stored: row.string("result")), error: row.string("error"),
                            createdAt: row.date("created_at") ?? Date(sqliteMillis: 0), expiresAt: row.date("expires_at") ?? Date(sqliteMillis: 0),
                            completedAt: row.date("completed_at"))
    }

    public func register(_ node: DeviceNodes.Node, in session: any StorageSession) throws {
        let db = try session.sqliteConnection()
        let owners = try db.query("SELECT subject FROM mobile_nodes WHERE device_id = ? UNION ALL SELECT subject FROM mobile_devices WHERE id = ?",
                                  node.deviceID, node.deviceID).compactMap { $0.string("subject") }
        guard owners.allSatisfy({ $0 == node.subject }) else { throw NodeError.notFound }
        try db.run("""
            INSERT INTO mobile_nodes (device_id, subject, name, platform, model, os_version, app_version, capabilities, permissions, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (device_id) DO UPDATE SET name = excluded.name, platform = excluded.platform, model = excluded.model,
                os_version = excluded.os_version, app_version = excluded.app_version, capabilities = excluded.capabilities,
                permissions = excluded.permissions, updated_at = excluded.updated_at
            """, node.deviceID, node.subject, node.name, node.platform, node.model, node.osVersion, node.appVersion,
            node.capabilitiesJSON, node.permissionsJSON, node.updatedAt.sqliteMillis)
    }

    public func node(deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Node? {
        try Self.node(deviceID: deviceID, subject: subject, in: try session.sqliteConnection())
    }

    private static func node(deviceID: String, subject: String, in db: Connection) throws -> DeviceNodes.Node? {
        try db.query("SELECT * FROM mobile_nodes WHERE device_id = ? AND subject = ?", deviceID, subject).first.map(node)
    }

    public func node(deviceID: String, subject: String) async throws -> DeviceNodes.Node? {
        try await database.asyncRead { db in try Self.node(deviceID: deviceID, subject: subject, in: db) }
    }

    public func nodes(subject: String, limit: Int) async throws -> [DeviceNodes.Node] {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM mobile_nodes WHERE subject = ? ORDER BY updated_at DESC, device_id LIMIT ?", subject, limit).map(Self.node)
        }
    }

    public func insert(_ command: DeviceNodes.Command, queueLimit: Int, now: Date,
                       in session: any StorageSession) throws -> (command: DeviceNodes.Command, created: Bool) {
        let db = try session.sqliteConnection()
        if let existing = try db.query("SELECT * FROM mobile_node_commands WHERE device_id = ? AND id = ?", command.deviceID, command.id).first {
            return (Self.command(existing), false)
        }
        let waiting = try db.query("SELECT count(*) AS n FROM mobile_node_commands WHERE device_id = ? AND status = 'queued' AND expires_at > ?",
                                   command.deviceID, now.sqliteMillis).first?.int("n") ?? 0
        guard waiting < queueLimit else { throw NodeError.queueFull(queueLimit) }
        try db.run("""
            INSERT INTO mobile_node_commands (id, device_id, subject, command, params, status, created_at, expires_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """, command.id, command.deviceID, command.subject, command.command, command.params.serialized(), command.status.rawValue,
            command.createdAt.sqliteMillis, command.expiresAt.sqliteMillis)
        return (command, true)
    }

    public func command(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Command? {
        try Self.command(id: id, deviceID: deviceID, subject: subject, in: try session.sqliteConnection())
    }

    private static func command(id: String, deviceID: String, subject: String, in db: Connection) throws -> DeviceNodes.Command? {
        try db.query("SELECT * FROM mobile_node_commands WHERE device_id = ? AND id = ? AND subject = ?", deviceID, id, subject).first.map(command)
    }

    public func command(id: String, deviceID: String, subject: String) async throws -> DeviceNodes.Command? {
        try await database.asyncRead { db in try Self.command(id: id, deviceID: deviceID, subject: subject, in: db) }
    }

    public func pending(deviceID: String, now: Date, limit: Int) async throws -> [DeviceNodes.Command] {
        try await database.asyncRead { db in
            try db.query("""
                SELECT * FROM mobile_node_commands WHERE device_id = ? AND status = 'queued' AND expires_at > ? ORDER BY created_at, id LIMIT ?
                """, deviceID, now.sqliteMillis, limit).map(Self.command)
        }
    }

    public func claim(id: String, deviceID: String, now: Date, in session: any StorageSession) throws -> Bool {
        try session.sqliteConnection().run("""
            UPDATE mobile_node_commands SET status = 'running' WHERE device_id = ? AND id = ? AND status = 'queued' AND expires_at > ?
            """, deviceID, id, now.sqliteMillis) == 1
    }

    public func finish(id: String, deviceID: String, status: DeviceNodes.CommandStatus, resultJSON: String?, error: String?, at: Date,
                       in session: any StorageSession) throws -> Bool {
        try session.sqliteConnection().run("""
            UPDATE mobile_node_commands SET status = ?, result = ?, error = ?, completed_at = ? WHERE device_id = ? AND id = ? AND status = 'running'
            """, status.rawValue, resultJSON, error, at.sqliteMillis, deviceID, id) == 1
    }

    public func expire(id: String, deviceID: String, at: Date) async throws {
        try await database.asyncTransaction { db in
            try db.run("""
                UPDATE mobile_node_commands SET status = 'expired', completed_at = ? WHERE device_id = ? AND id = ? AND status IN ('queued', 'running')
                """, at.sqliteMillis, deviceID, id)
        }
    }

    public func removeSettled(before: Date) async throws -> Int {
        try await database.asyncDeleteInBatches(from: "mobile_node_commands", where: "expires_at < ? AND COALESCE(completed_at, 0) < ?",
                                                 arguments: [before.sqliteMillis, before.sqliteMillis])
    }
}
