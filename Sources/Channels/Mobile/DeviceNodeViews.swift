import Foundation
import JSON

extension DeviceNodes {
    /// Where a node command stands, in the original's words: an open set (a struct with static members, as
    /// APNSwift's push types), so a state a newer phone reports breaks no caller.
    public struct CommandStatus: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public let rawValue: String

        public init(rawValue: String) { self.rawValue = rawValue }

        public static let queued = CommandStatus(rawValue: "queued")
        public static let running = CommandStatus(rawValue: "running")
        public static let completed = CommandStatus(rawValue: "completed")
        public static let failed = CommandStatus(rawValue: "failed")
        public static let declined = CommandStatus(rawValue: "declined")
        public static let expired = CommandStatus(rawValue: "expired")

        /// The states a command ends in: the phone's outcome, or its expiry.
        public static let terminal: Set<CommandStatus> = [.completed, .failed, .declined, .expired]
        public var isTerminal: Bool { Self.terminal.contains(self) }
        public var description: String { rawValue }
    }
}

/// Nodes and their commands as the original's node protocol shows them; the routes and the agents' phone tools
/// both answer with these, so a model reads what the phone's API says.
extension DeviceNodes {
    public struct NodeView: Encodable, Sendable {
        var deviceID, name, platform, model, osVersion, appVersion: String
        var capabilities: [String]
        var permissions: [String: String]
        var foregroundOnly = true
        var updatedAt: Timestamp

        public init(_ n: Node) {
            deviceID = n.deviceID
            name = n.name
            platform = n.platform
            model = n.model
            osVersion = n.osVersion
            appVersion = n.appVersion
            capabilities = n.capabilities
            permissions = n.permissions
            updatedAt = Timestamp(n.updatedAt)
        }

        enum CodingKeys: String, CodingKey {
            case name, platform, model, capabilities, permissions
            case deviceID = "device_id", osVersion = "os_version", appVersion = "app_version", foregroundOnly = "foreground_only", updatedAt = "updated_at"
        }
    }

    public struct CommandView: Encodable, Sendable {
        var id, deviceID, command: String
        var status: CommandStatus
        var params: JSONValue
        var result: JSONValue?
        var error: String?
        var createdAt, expiresAt: Timestamp
        var completedAt: Timestamp?

        public init(_ c: Command) {
            id = c.id
            deviceID = c.deviceID
            command = c.command
            status = c.status
            params = c.params
            result = c.result
            error = c.error
            createdAt = Timestamp(c.createdAt)
            expiresAt = Timestamp(c.expiresAt)
            completedAt = c.completedAt.map(Timestamp.init)
        }

        enum CodingKeys: String, CodingKey {
            case id, command, status, params, result, error
            case deviceID = "device_id", createdAt = "created_at", expiresAt = "expires_at", completedAt = "completed_at"
        }
    }
}
