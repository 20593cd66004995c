import Foundation
import JSON
import Mobile
import PostgreSQL
import Storage

/// Nodes and their command queue on PostgreSQL (`mobile_nodes`, `mobile_node_commands`: mobile migration 4), so a
/// command queued through one gateway is polled, claimed and answered through any other. Races between nodes are
/// settled by the rows: a node id held by one person cannot be taken by another's concurrent registration (the
/// upsert only updates the holder's row), inserts for one device queue behind its node row's lock (so the queue
/// limit holds), and a claim is one conditional update (of two, one wins).
public struct PostgresDeviceNodeStore: DeviceNodeStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public var transactions: any TransactionalStorage { pool }

    static func node(_ row: PostgresRow) -> DeviceNodes.Node {
        DeviceNodes.Node(deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "", name: row.string("name") ?? "",
                         platform: row.string("platform") ?? "ios", model: row.string("model") ?? "", osVersion: row.string("os_version") ?? "",
                         appVersion: row.string("app_version") ?? "", capabilities: DeviceNodes.Node.capabilities(stored: row.string("capabilities")),
                         permissions: DeviceNodes.Node.permissions(stored: row.string("permissions")),
                         updatedAt: Date(postgresMillis: row.int("updated_at") ?? 0))
    }

    static func command(_ row: PostgresRow) -> DeviceNodes.Command {
        DeviceNodes.Command(id: row.string("id") ?? "", deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "",
                            command: row.string("command") ?? "", params: DeviceNodes.Command.params(stored: row.string("params")),
                            status: DeviceNodes.CommandStatus(rawValue: row.string("status") ?? "queued"),
                            result: DeviceNodes.Command.result(stored: row.string("result")), error: row.string("error"),
                            createdAt: Date(postgresMillis: row.int("created_at") ?? 0), expiresAt: Date(postgresMillis: row.int("expires_at") ?? 0),
                            completedAt: row.int("completed_at").map(Date.init(postgresMillis:)))
    }

    public func register(_ node: DeviceNodes.Node, in session: any StorageSession) throws {
        let db = try session.postgresConnection()
        let deviceOwners = try db.query("SELECT subject FROM mobile_devices WHERE id = $1", node.deviceID).compactMap { $0.string("subject") }
        guard deviceOwners.allSatisfy({ $0 == node.subject }) else { throw NodeError.notFound }
        // The update only touches the holder's own row: a node id someone else holds (or took a moment ago) changes 0 rows.
        let written = try db.run("""
            INSERT INTO mobile_nodes (device_id, subject, name, platform, model, os_version, app_version, capabilities, permissions, updated_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
            ON CONFLICT (device_id) DO UPDATE SET name = excluded.name, platform = excluded.platform, model = excluded.model,
                os_version = excluded.os_version, app_version = excluded.app_version, capabilities = excluded.capabilities,
                permissions = excluded.permissions, updated_at = excluded.updated_at
            WHERE mobile_nodes.subject = excluded.subject
            """, node.deviceID, node.subject, Array(node.name.utf8), Array(node.platform.utf8), Array(node.model.utf8), Array(node.osVersion.utf8),
            Array(node.appVersion.utf8), node.capabilitiesJSON, node.permissionsJSON, node.updatedAt.postgresMillis)
        guard written == 1 else { throw NodeError.notFound }
    }

    public func node(deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Node? {
        try Self.node(deviceID: deviceID, subject: subject, in: try session.postgresConnection())
    }

    private static func node(deviceID: String, subject: String, in db: PostgresConnection) throws -> DeviceNodes.Node? {
        try db.query("SELECT * FROM mobile_nodes WHERE device_id = $1 AND subject = $2", deviceID, subject).first.map(node)
    }

    public func node(deviceID: String, subject: String) async throws -> DeviceNodes.Node? {
        try await pool.withConnection { db in try Self.node(deviceID: deviceID, subject: subject, in: db) }
    }

    public func nodes(subject: String, limit: Int) async throws -> [DeviceNodes.Node] {
        try await pool.withConnection { db in
            try db.query("SELECT * FROM mobile_nodes WHERE subject = $1 ORDER BY updated_at DESC, device_id LIMIT $2", subject, limit).map(Self.node)
        }
    }

    public func insert(_ command: DeviceNodes.Command, queueLimit: Int, now: Date,
                       in session: any StorageSession) throws -> (command: DeviceNodes.Command, created: Bool) {
        let db = try session.postgresConnection()
        // One device's inserts queue here, whichever gateway takes them, so the count below stays true until commit.
        _ = try db.query("SELECT 1 FROM mobile_nodes WHERE device_id = $1 FOR UPDATE", command.deviceID)
        if let existing = try db.query("SELECT * FROM mobile_node_commands WHERE device_id = $1 AND id = $2", command.deviceID, command.id).first {
            return (Self.command(existing), false)
        }
        let waiting = try db.query("SELECT count(*) AS n FROM mobile_node_commands WHERE device_id = $1 AND status = 'queued' AND expires_at > $2",
                                   command.deviceID, now.postgresMillis).first?.int("n") ?? 0
        guard waiting < Int64(queueLimit) else { throw NodeError.queueFull(queueLimit) }
        try db.run("""
            INSERT INTO mobile_node_commands (id, device_id, subject, command, params, status, created_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            """, command.id, command.deviceID, command.subject, command.command, command.params.serialized(), command.status.rawValue,
            command.createdAt.postgresMillis, command.expiresAt.postgresMillis)
        return (command, true)
    }

    public func command(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Command? {
        try Self.command(id: id, deviceID: deviceID, subject: subject, in: try session.postgresConnection())
    }

    private static func command(id: String, deviceID: String, subject: String, in db: PostgresConnection) throws -> DeviceNodes.Command? {
        try db.query("SELECT * FROM mobile_node_commands WHERE device_id = $1 AND id = $2 AND subject = $3", deviceID, id, subject).first.map(command)
    }

    public func command(id: String, deviceID: String, subject: String) async throws -> DeviceNodes.Command? {
        try await pool.withConnection { db in try Self.command(id: id, deviceID: deviceID, subject: subject, in: db) }
    }

    public func pending(deviceID: String, now: Date, limit: Int) async throws -> [DeviceNodes.Command] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT * FROM mobile_node_commands WHERE device_id = $1 AND status = 'queued' AND expires_at > $2 ORDER BY created_at, id LIMIT $3
                """, deviceID, now.postgresMillis, limit).map(Self.command)
        }
    }

    public func claim(id: String, deviceID: String, now: Date, in session: any StorageSession) throws -> Bool {
        try session.postgresConnection().run("""
            UPDATE mobile_node_commands SET status = 'running' WHERE device_id = $1 AND id = $2 AND status = 'queued' AND expires_at > $3
            """, deviceID, id, now.postgresMillis) == 1
    }

    public func finish(id: String, deviceID: String, status: DeviceNodes.CommandStatus, resultJSON: String?, error: String?, at: Date,
                       in session: any StorageSession) throws -> Bool {
        try session.postgresConnection().run("""
            UPDATE mobile_node_commands SET status = $1, result = $2, error = $3, completed_at = $4 WHERE device_id = $5 AND id = $6 AND status = 'running'
            """, status.rawValue, resultJSON, error.map { Array($0.utf8) }, at.postgresMillis, deviceID, id) == 1
    }

    public func expire(id: String, deviceID: String, at: Date) async throws {
        _ = try await pool.transaction { db in
            try db.run("""
                UPDATE mobile_node_commands SET status = 'expired', completed_at = $1 WHERE device_id = $2 AND id = $3 AND status IN ('queued', 'running')
                """, at.postgresMillis, deviceID, id)
        }
    }

    public func removeSettled(before: Date) async throws -> Int {
        try await pool.deleteInBatches(from: "mobile_node_commands", where: "expires_at < $1 AND COALESCE(completed_at, 0) < $1",
                                       arguments: [before.postgresMillis])
    }
}
