import JSON
import ChannelAPI
import Crypto
import Foundation
import Identity
import Storage

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

        public init(id: String, deviceID: String, subject: String, command: String, params: JSONValue, status: CommandStatus, result: JSONValue?,
                    error: String?, createdAt: Date, expiresAt: Date, completedAt: Date?) {
            self.id = id
            self.deviceID = deviceID
            self.subject = subject
            self.command = command
            self.params = params
            self.status = status
            self.result = result
            self.error = error
            self.createdAt = createdAt
            self.expiresAt = expiresAt
            self.completedAt = completedAt
        }
    }

    public let store: any DeviceNodeStore
    /// Where a queued command's wake-up is written, in the command's own transaction.
    let inbox: any Inbox
    let dispatcher: PushDispatcher?
    public let clock: any WallClock

    public init(store: any DeviceNodeStore, inbox: any Inbox, dispatcher: PushDispatcher?, clock: any WallClock) {
        self.store = store
        self.inbox = inbox
        self.dispatcher = dispatcher
        self.clock = clock
    }

    /// The engine seam of the store's database: what the routes build their answers in.
    public var transactions: any TransactionalStorage { store.transactions }

    /// A command as it reads now: a queued one past its expiry is expired.
    private func readNow(_ stored: Command) -> Command {
        var command = stored
        if command.status == .queued, command.expiresAt <= clock.now() { command.status = .expired }
        return command
    }

    static func notFound() -> NodeError { .notFound }
    static func conflict() -> NodeError { .conflict }
    static func invalid(_ detail: String, field: String? = nil) -> NodeError { .invalid(detail, field: field) }

    /// Ids are stored and compared as given; a control character in one is refused (no engine is asked to keep it).
    static func checkIdentifier(_ id: String, field: String) throws(NodeError) {
        guard !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw invalid("\(field) must not contain control characters", field: field)
        }
    }

    // MARK: Nodes

    /// Registers (or replaces) the caller's node, inside the caller's transaction; an id that is someone else's is
    /// "not found".
    public func register(_ node: Node, in session: any StorageSession) throws -> Node {
        try Self.checkIdentifier(node.deviceID, field: "device_id")
        try store.register(node, in: session)
        return node
    }

    public func nodes(subject: String) async throws -> [Node] {
        try await store.nodes(subject: subject, limit: 100)
    }

    public func node(deviceID: String, subject: String) async throws -> Node? {
        try Self.checkIdentifier(deviceID, field: "device_id")
        return try await store.node(deviceID: deviceID, subject: subject)
    }

    /// A device registered with the `canvas` capability (the first command protocol) is a node with
    /// `canvas.present`: made or widened here. False when the device has neither that capability nor a node with it.
    public func adoptCanvasCapability(of device: Device) async throws -> Bool {
        let existing = try await node(deviceID: device.id, subject: device.subject)
        if existing?.capabilities.contains("canvas.present") == true { return true }
        guard device.capabilities.contains("canvas") else { return false }
        var node = existing ?? Node(deviceID: device.id, subject: device.subject, name: device.name, platform: "ios", model: "", osVersion: "",
                                    appVersion: "", capabilities: [], permissions: [:], updatedAt: clock.now())
        node.capabilities.append("canvas.present")
        node.updatedAt = clock.now()
        _ = try await transactions.withTransaction { session in try register(node, in: session) }
        return true
    }

    /// Waits for the command's outcome until it expires; one still open then is settled as expired.
    public func settle(id: String, deviceID: String, subject: String) async throws -> Command {
        let queued = try await command(id: id, deviceID: deviceID, subject: subject)
        let left = max(0, queued.expiresAt.timeIntervalSince(clock.now()))
        let current = try await waitForOutcome(id: id, deviceID: deviceID, subject: subject, wait: .milliseconds(Int(left * 1000)))
        guard !current.status.isTerminal else { return current }
        // Claimed but not answered by its expiry: settled as expired.
        try await store.expire(id: id, deviceID: deviceID, at: clock.now())
        return try await command(id: id, deviceID: deviceID, subject: subject)
    }

    // MARK: Commands

    /// Queues a command for the caller's node and wakes the phone, inside the caller's transaction. The same id
    /// again is the same command when the command and params match, else a conflict.
    public func enqueue(deviceID: String, subject: String, id: String?, command: String, params: JSONValue, expiresAt: Date?,
                        in session: any StorageSession) throws -> Command {
        try Self.checkIdentifier(deviceID, field: "device_id")
        guard let node = try store.node(deviceID: deviceID, subject: subject, in: session) else { throw Self.notFound() }
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
        try Self.checkIdentifier(commandID, field: "id")
        let fresh = Command(id: commandID, deviceID: deviceID, subject: subject, command: command, params: stored, status: .queued,
                            result: nil, error: nil, createdAt: now, expiresAt: expiry, completedAt: nil)
        let (queued, created) = try store.insert(fresh, queueLimit: Self.maximumQueued, now: now, in: session)
        guard created else {
            guard queued.command == command, queued.params == stored else { throw Self.conflict() }
            return readNow(queued)
        }
        // A discreet wake-up, as for any command, committed with the command: the phone opens and polls.
        let signal = WakeSignal(category: .command, title: "Soulacy", body: "An agent has something for this phone.",
                                deepLink: "soulacy://command/\(commandID)", threadID: "commands", extra: ["command_id": commandID, "command": command],
                                expiresAt: expiry, collapseID: commandID)
        if try inbox.queueWakeUp(signal, deviceID: deviceID, in: session), let dispatcher {
            transactions.afterCommit { dispatcher.poke() }
        }
        return queued
    }

    /// The same in a transaction of its own (an agent's phone tool).
    public func enqueue(deviceID: String, subject: String, id: String?, command: String, params: JSONValue, expiresAt: Date?) async throws -> Command {
        try await transactions.withTransaction { session in
            try enqueue(deviceID: deviceID, subject: subject, id: id, command: command, params: params, expiresAt: expiresAt, in: session)
        }
    }

    /// Queued and unexpired, oldest first, at most 20; reading changes nothing.
    public func pending(deviceID: String, subject: String) async throws -> [Command] {
        guard try await node(deviceID: deviceID, subject: subject) != nil else { throw Self.notFound() }
        return try await store.pending(deviceID: deviceID, now: clock.now(), limit: 20)
    }

    public func command(id: String, deviceID: String, subject: String) async throws -> Command {
        try Self.checkIdentifier(deviceID, field: "device_id")
        try Self.checkIdentifier(id, field: "id")
        guard let found = try await store.command(id: id, deviceID: deviceID, subject: subject) else { throw Self.notFound() }
        return readNow(found)
    }

    /// One command as it reads now, inside the caller's transaction.
    public func command(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Command {
        try Self.checkIdentifier(deviceID, field: "device_id")
        try Self.checkIdentifier(id, field: "id")
        guard let found = try store.command(id: id, deviceID: deviceID, subject: subject, in: session) else { throw Self.notFound() }
        return readNow(found)
    }

    /// queued → running, once, inside the caller's transaction: the claim must still be queued, unexpired, and in
    /// the node's capabilities.
    public func claim(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Command {
        try Self.checkIdentifier(deviceID, field: "device_id")
        guard let node = try store.node(deviceID: deviceID, subject: subject, in: session) else { throw Self.notFound() }
        _ = try command(id: id, deviceID: deviceID, subject: subject, in: session)
        let claimed = try store.claim(id: id, deviceID: deviceID, now: clock.now(), in: session)
        let current = try command(id: id, deviceID: deviceID, subject: subject, in: session)
        guard claimed, node.capabilities.contains(current.command) else { throw Self.conflict() }
        return current
    }

    /// The phone's outcome, from running only, inside the caller's transaction; the identical outcome again is
    /// accepted, a different one is a conflict.
    public func finish(id: String, deviceID: String, subject: String, status: CommandStatus, result: JSONValue?, error: String?,
                       in session: any StorageSession) throws -> Command {
        guard status.isTerminal else {
            throw Self.invalid("status must be completed, failed, declined or expired", field: "status")
        }
        let resultText = result.map { $0.serialized() }
        if let resultText, resultText.utf8.count > Self.maximumResultBytes { throw Self.invalid("result must be at most 1 MiB of JSON", field: "result") }
        if let error, error.count > 4096 { throw Self.invalid("error must be at most 4096 characters", field: "error") }
        let current = try command(id: id, deviceID: deviceID, subject: subject, in: session)
        if current.status.isTerminal, current.status != .expired || current.completedAt != nil {
            guard current.status == status, current.result == result, current.error == error else { throw Self.conflict() }
            return current
        }
        guard try store.finish(id: id, deviceID: deviceID, status: status, resultJSON: resultText, error: error, at: clock.now(), in: session) else {
            throw Self.conflict()
        }
        return try command(id: id, deviceID: deviceID, subject: subject, in: session)
    }

    /// Waits (polling every half second, as the original's tool does) for a terminal status or the end of `wait`.
    /// The table is the truth: an outcome posted through another gateway on the same database is seen here.
    public func waitForOutcome(id: String, deviceID: String, subject: String, wait: Duration) async throws -> Command {
        let deadline = ContinuousClock.now + wait
        while true {
            let current = try await command(id: id, deviceID: deviceID, subject: subject)
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

/// Nodes and commands as every engine stores them: lists, maps, params and results as JSON text this gateway wrote,
/// read back leniently (a column no longer readable is empty, never an error that hides the rest of the row).
extension DeviceNodes.Node {
    public var capabilitiesJSON: String { JSONValue.array(capabilities.map(JSONValue.string)).serialized() }
    public var permissionsJSON: String { JSONValue.object(permissions.mapValues(JSONValue.string)).serialized() }
    public static func capabilities(stored: String?) -> [String] { stored.flatMap { try? JSONCoding.decode([String].self, from: Data($0.utf8)) } ?? [] }
    public static func permissions(stored: String?) -> [String: String] {
        stored.flatMap { try? JSONCoding.decode([String: String].self, from: Data($0.utf8)) } ?? [:]
    }
}

extension DeviceNodes.Command {
    public static func params(stored: String?) -> JSONValue { (try? JSONValue.parse(Array((stored ?? "{}").utf8))) ?? [:] }
    public static func result(stored: String?) -> JSONValue? { stored.flatMap { try? JSONValue.parse(Array($0.utf8)) } }
}
