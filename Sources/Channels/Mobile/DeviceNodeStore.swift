import JSON
import ChannelAPI
import Crypto
import Foundation
import Identity
import SQLite

/// The phone as the agent's hands, as the original Soulacy app speaks it (SOULACY-CONTRACT.md §12): the app registers
/// as a node with the commands it has switched on, polls for queued commands while in the foreground, claims one
/// (queued → running, exactly one claim wins), and posts its outcome once.
public final class DeviceNodes: Sendable {
    /// The original's allowlist, in its order (also the `mobile.invoke` enum).
    public static let commands = [
        "device.info", "location.current", "contacts.search", "calendar.events", "reminders.list", "motion.current", "system.notify",
        "camera.capture", "photos.pick", "canvas.present", "canvas.snapshot", "health.summary", "focus.status",
    ]
    public static let maximumParamsBytes = 65536
    public static let maximumResultBytes = 1 << 20
    public static let maximumQueued = 100
    public static let defaultExpiry: TimeInterval = 300
    public static let maximumExpiry: TimeInterval = 900
    public static let pollIntervalSeconds = 5


    public struct Node: Sendable, Equatable {
        public var deviceID: String
        public var subject: String
        public var name: String
        public var platform: String
        public var model: String
        public var osVersion: String
        public var appVersion: String
        public var capabilities: [String]
        public var permissions: [String: String]
        public var updatedAt: Date

        public init(deviceID: String, subject: String, name: String, platform: String, model: String, osVersion: String, appVersion: String,
                    capabilities: [String], permissions: [String: String], updatedAt: Date) {
            self.deviceID = deviceID
            self.subject = subject
            self.name = name
            self.platform = platform
            self.model = model
            self.osVersion = osVersion
            self.appVersion = appVersion
            self.capabilities = capabilities
            self.permissions = permissions
            self.updatedAt = updatedAt
        }
    }

    public struct Command: Sendable, Equatable {
        public var id: String
        public var deviceID: String
        public var subject: String
        public var command: String
        public var params: JSONValue
        public var status: CommandStatus
        public var result: JSONValue?
        public var error: String?
        public var createdAt: Date
        public var expiresAt: Date
        public var completedAt: Date?
    }

    public let store: MobileStore
    let dispatcher: PushDispatcher?
    public let clock: any WallClock

    public init(store: MobileStore, dispatcher: PushDispatcher?, clock: any WallClock) throws {
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
    }

    static func ms(_ d: Date) -> Int64 { d.sqliteMillis }

    static func decode<T: Decodable>(_ text: String?, as: T.Type) -> T? { text.flatMap { try? JSONCoding.decode(T.self, from: Data($0.utf8)) } }

    private static func node(_ row: Row) -> Node {
        Node(deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "", name: row.string("name") ?? "",
             platform: row.string("platform") ?? "ios", model: row.string("model") ?? "", osVersion: row.string("os_version") ?? "",
             appVersion: row.string("app_version") ?? "", capabilities: decode(row.string("capabilities"), as: [String].self) ?? [],
             permissions: decode(row.string("permissions"), as: [String: String].self) ?? [:], updatedAt: row.date("updated_at") ?? Date(sqliteMillis: 0))
    }

    /// A command as it reads now: a queued one past its expiry is expired.
    private func read(_ row: Row) -> Command {
        var c = Command(id: row.string("id") ?? "", deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "",
                        command: row.string("command") ?? "", params: (try? JSONValue.parse(Array((row.string("params") ?? "{}").utf8))) ?? [:],
                        status: CommandStatus(rawValue: row.string("status") ?? "queued"), result: row.string("result").flatMap { try? JSONValue.parse(Array($0.utf8)) },
                        error: row.string("error"), createdAt: row.date("created_at") ?? Date(sqliteMillis: 0),
                        expiresAt: row.date("expires_at") ?? Date(sqliteMillis: 0), completedAt: row.date("completed_at"))
        if c.status == .queued, c.expiresAt <= clock.now() { c.status = .expired }
        return c
    }

    static func notFound() -> NodeError { .notFound }
    static func conflict() -> NodeError { .conflict }
    static func invalid(_ detail: String, field: String? = nil) -> NodeError { .invalid(detail, field: field) }

    // MARK: Nodes

    /// Registers (or replaces) the caller's node; an id that is someone else's is "not found".
    public func register(_ node: Node) throws -> Node {
        try store.database.transaction { db in
            let owners = try db.query("SELECT subject FROM mobile_nodes WHERE device_id = ? UNION ALL SELECT subject FROM mobile_devices WHERE id = ?",
                                      node.deviceID, node.deviceID).compactMap { $0.string("subject") }
            guard owners.allSatisfy({ $0 == node.subject }) else { throw Self.notFound() }
            try db.run("""
                INSERT INTO mobile_nodes (device_id, subject, name, platform, model, os_version, app_version, capabilities, permissions, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (device_id) DO UPDATE SET name = excluded.name, platform = excluded.platform, model = excluded.model,
                    os_version = excluded.os_version, app_version = excluded.app_version, capabilities = excluded.capabilities,
                    permissions = excluded.permissions, updated_at = excluded.updated_at
                """, node.deviceID, node.subject, node.name, node.platform, node.model, node.osVersion, node.appVersion,
                JSONValue.array(node.capabilities.map(JSONValue.string)).serialized(),
                JSONValue.object(node.permissions.mapValues(JSONValue.string)).serialized(), Self.ms(node.updatedAt))
        }
        return node
    }

    public func nodes(subject: String) throws -> [Node] {
        try store.database.read { db in
            try db.query("SELECT * FROM mobile_nodes WHERE subject = ? ORDER BY updated_at DESC, device_id LIMIT 100", subject).map(Self.node)
        }
    }

    public func node(deviceID: String, subject: String) throws -> Node? {
        try store.database.read { db in try db.query("SELECT * FROM mobile_nodes WHERE device_id = ? AND subject = ?", deviceID, subject).first.map(Self.node) }
    }

    /// A device registered with the `canvas` capability (the first command protocol) is a node with
    /// `canvas.present`: made or widened here. False when the device has neither that capability nor a node with it.
    public func adoptCanvasCapability(of device: Device) throws -> Bool {
        let existing = try node(deviceID: device.id, subject: device.subject)
        if existing?.capabilities.contains("canvas.present") == true { return true }
        guard device.capabilities.contains("canvas") else { return false }
        var node = existing ?? Node(deviceID: device.id, subject: device.subject, name: device.name, platform: "ios", model: "", osVersion: "",
                                    appVersion: "", capabilities: [], permissions: [:], updatedAt: clock.now())
        node.capabilities.append("canvas.present")
        node.updatedAt = clock.now()
        _ = try register(node)
        return true
    }

    /// Waits for the command's outcome until it expires; one still open then is settled as expired.
    public func settle(id: String, deviceID: String, subject: String) async throws -> Command {
        let queued = try command(id: id, deviceID: deviceID, subject: subject)
        let left = max(0, queued.expiresAt.timeIntervalSince(clock.now()))
        let current = try await waitForOutcome(id: id, deviceID: deviceID, subject: subject, wait: .milliseconds(Int(left * 1000)))
        guard !current.status.isTerminal else { return current }
        // Claimed but not answered by its expiry: settled as expired.
        try store.database.transaction { db in
            try db.run("""
                UPDATE mobile_node_commands SET status = 'expired', completed_at = ? WHERE device_id = ? AND id = ? AND status IN ('queued', 'running')
                """, Self.ms(clock.now()), deviceID, id)
        }
        return try command(id: id, deviceID: deviceID, subject: subject)
    }

    // MARK: Commands

    /// Queues a command for the caller's node and wakes the phone. The same id again is the same command when the
    /// command and params match, else a conflict.
    public func enqueue(deviceID: String, subject: String, id: String?, command: String, params: JSONValue, expiresAt: Date?) throws -> Command {
        guard let node = try node(deviceID: deviceID, subject: subject) else { throw Self.notFound() }
        guard Self.commands.contains(command) else {
            throw Self.invalid("unknown command \"\(command)\"; one of \(Self.commands.joined(separator: ", "))", field: "command")
        }
        guard node.capabilities.contains(command) else { throw Self.invalid("device has not enabled \"\(command)\"", field: "command") }
        guard params.objectValue != nil else { throw Self.invalid("params must be an object", field: "params") }
        guard params.serializedBytes().count <= Self.maximumParamsBytes else { throw Self.invalid("params must be at most 64 KiB", field: "params") }
        var stored = params
        if command == "canvas.present" { stored = try CanvasCard(params).json }
        let now = clock.now()
        let expiry = expiresAt ?? now.addingTimeInterval(Self.defaultExpiry)
        guard expiry > now, expiry <= now.addingTimeInterval(Self.maximumExpiry) else {
            throw Self.invalid("expires_at must be after now and at most 15 minutes ahead", field: "expires_at")
        }
        let commandID = id ?? UUID().uuidString.lowercased()
        guard !commandID.isEmpty, commandID.utf8.count <= 128 else { throw Self.invalid("id must be 1 to 128 characters", field: "id") }
        let (queued, created): (Command, Bool) = try store.database.transaction { db in
            if let existing = try db.query("SELECT * FROM mobile_node_commands WHERE device_id = ? AND id = ?", deviceID, commandID).first.map(read) {
                guard existing.command == command, existing.params == stored else { throw Self.conflict() }
                return (existing, false)
            }
            let waiting = try db.query("SELECT count(*) AS n FROM mobile_node_commands WHERE device_id = ? AND status = 'queued' AND expires_at > ?",
                                       deviceID, Self.ms(now)).first?.int("n") ?? 0
            guard waiting < Self.maximumQueued else {
                throw NodeError.queueFull(Self.maximumQueued)
            }
            try db.run("""
                INSERT INTO mobile_node_commands (id, device_id, subject, command, params, status, created_at, expires_at)
                VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)
                """, commandID, deviceID, subject, command, stored.serialized(), Self.ms(now), Self.ms(expiry))
            return (Command(id: commandID, deviceID: deviceID, subject: subject, command: command, params: stored, status: .queued,
                            result: nil, error: nil, createdAt: now, expiresAt: expiry, completedAt: nil), true)
        }
        if created {
            // A discreet wake-up, as for any command: the phone opens and polls.
            let signal = WakeSignal(category: .command, title: "Soulacy", body: "An agent has something for this phone.",
                                    deepLink: "soulacy://command/\(commandID)", threadID: "commands", extra: ["command_id": commandID, "command": command],
                                    expiresAt: expiry, collapseID: commandID)
            _ = try? MobileDeviceAlerts(store: store, dispatcher: dispatcher).alert(signal, deviceID: deviceID)
        }
        return queued
    }

    /// Queued and unexpired, oldest first, at most 20; reading changes nothing.
    public func pending(deviceID: String, subject: String) throws -> [Command] {
        guard try node(deviceID: deviceID, subject: subject) != nil else { throw Self.notFound() }
        return try store.database.read { db in
            try db.query("""
                SELECT * FROM mobile_node_commands WHERE device_id = ? AND status = 'queued' AND expires_at > ? ORDER BY created_at, id LIMIT 20
                """, deviceID, Self.ms(clock.now())).map(read)
        }
    }

    public func command(id: String, deviceID: String, subject: String) throws -> Command {
        guard let found = try store.database.read({ db in
            try db.query("SELECT * FROM mobile_node_commands WHERE device_id = ? AND id = ? AND subject = ?", deviceID, id, subject).first.map(read)
        }) else { throw Self.notFound() }
        return found
    }

    /// queued → running, once: the claim must still be queued, unexpired, and in the node's capabilities.
    public func claim(id: String, deviceID: String, subject: String) throws -> Command {
        let now = clock.now()
        guard let node = try node(deviceID: deviceID, subject: subject) else { throw Self.notFound() }
        _ = try command(id: id, deviceID: deviceID, subject: subject)
        let claimed = try store.database.transaction { db in
            try db.run("""
                UPDATE mobile_node_commands SET status = 'running' WHERE device_id = ? AND id = ? AND status = 'queued' AND expires_at > ?
                """, deviceID, id, Self.ms(now)) == 1
        }
        let current = try command(id: id, deviceID: deviceID, subject: subject)
        guard claimed, node.capabilities.contains(current.command) else { throw Self.conflict() }
        return current
    }

    /// The phone's outcome, from running only; the identical outcome again is accepted, a different one is a conflict.
    public func finish(id: String, deviceID: String, subject: String, status: CommandStatus, result: JSONValue?, error: String?) throws -> Command {
        guard status.isTerminal else {
            throw Self.invalid("status must be completed, failed, declined or expired", field: "status")
        }
        let resultText = result.map { $0.serialized() }
        if let resultText, resultText.utf8.count > Self.maximumResultBytes { throw Self.invalid("result must be at most 1 MiB of JSON", field: "result") }
        if let error, error.count > 4096 { throw Self.invalid("error must be at most 4096 characters", field: "error") }
        let current = try command(id: id, deviceID: deviceID, subject: subject)
        if current.status.isTerminal, current.status != .expired || current.completedAt != nil {
            guard current.status == status, current.result == result, current.error == error else { throw Self.conflict() }
            return current
        }
        let now = clock.now()
        let settled = try store.database.transaction { db in
            try db.run("""
                UPDATE mobile_node_commands SET status = ?, result = ?, error = ?, completed_at = ? WHERE device_id = ? AND id = ? AND status = 'running'
                """, status.rawValue, resultText, error, Self.ms(now), deviceID, id) == 1
        }
        guard settled else { throw Self.conflict() }
        return try command(id: id, deviceID: deviceID, subject: subject)
    }

    /// Waits (polling every half second, as the original's tool does) for a terminal status or the end of `wait`.
    public func waitForOutcome(id: String, deviceID: String, subject: String, wait: Duration) async throws -> Command {
        let deadline = ContinuousClock.now + wait
        while true {
            let current = try command(id: id, deviceID: deviceID, subject: subject)
            if current.status.isTerminal || ContinuousClock.now >= deadline { return current }
            try await Task.sleep(for: .milliseconds(500))
        }
    }
}

/// What the node store refuses, in the original's words (the HTTP layer maps each to its status: DeviceNodesAPI).
public enum NodeError: Error, Equatable, CustomStringConvertible {
    /// Not the caller's, or not there: the original does not tell the two apart.
    case notFound
    /// Claimed, settled, or the same id with another command.
    case conflict
    case invalid(String, field: String?)
    case queueFull(Int)

    public var description: String {
        switch self {
        case .notFound: "device or command not found"
        case .conflict: "mobile node command has already been claimed or settled"
        case .invalid(let detail, _): "invalid mobile node request: \(detail)"
        case .queueFull(let limit): "this phone already has \(limit) commands waiting"
        }
    }
}
