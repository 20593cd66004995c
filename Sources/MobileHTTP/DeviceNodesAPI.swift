import Mobile
import APIKit
import ChannelAPI
import Foundation
import Identity

/// `/api/v1/mobile/nodes`: the original app's node routes.
public struct DeviceNodesAPI: Sendable {
    let nodes: DeviceNodes
    let clock: any WallClock

    public init(nodes: DeviceNodes, clock: any WallClock) {
        self.nodes = nodes
        self.clock = clock
    }

    public var routes: [Route] {
        var nodes = RouteGroup("/api/v1/mobile/nodes", role: .viewer)
        nodes.post("/register", summary: "Register this phone as a node with the commands it has switched on", handler: register)
        nodes.get(summary: "Your nodes and the supported commands", handler: list)
        nodes.get("/:device/commands", summary: "Queued commands for a node (polling changes nothing)", handler: pending)
        nodes.post("/:device/commands", summary: "Queue a command for a node (Idempotency-Key is its id)", handler: enqueue)
        nodes.get("/:device/commands/:id", summary: "One node command", handler: get)
        nodes.post("/:device/commands/:id/claim", summary: "Claim a queued command (exactly one claim wins)", handler: claim)
        nodes.post("/:device/commands/:id/result", summary: "A claimed command's outcome", handler: result)
        return nodes.routes
    }

    /// `POST …/nodes/register`: the phone and what it offers. The lists are taken as JSON values, so a wrong entry is
    /// refused in the original's words (`capabilities[2] is not one of …`), not the decoder's.
    struct NodeRegistration: Decodable {
        var deviceID: String?
        var platform: String?
        var name: String?
        var model: String?
        var osVersion: String?
        var appVersion: String?
        var capabilities: [JSONValue]?
        var permissions: [String: JSONValue]?

        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id"
            case platform
            case name
            case model
            case osVersion = "os_version"
            case appVersion = "app_version"
            case capabilities
            case permissions
        }
    }

    /// `device_id` and `name` are limited in bytes, as the original's len(); this gateway's own limits on model and
    /// versions count characters (code points), as openapi.yaml's maxLength does.
    static func text(_ value: String?, _ key: String, max: Int, inBytes: Bool = true) throws -> String {
        guard let value else { return "" }
        guard (inBytes ? value.utf8.count : value.unicodeScalars.count) <= max else { throw NodeError.invalid("\(key) is too long", field: key) }
        return value
    }

    @Sendable func register(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        guard request.body.count <= 16384 else { throw NodeError.invalid("a node registration is at most 16384 bytes", field: nil) }
        let body: NodeRegistration
        do {
            body = try request.decode(NodeRegistration.self)
        } catch {
            // Not a JSON object at all: the original's words. A wrong field keeps its own 400 naming it.
            guard error.kind != .invalidJSON else { throw APIError(status: 400, code: "invalid_json", message: "invalid node registration") }
            throw error
        }
        let deviceID = SchemaWhitespace.trim(try Self.text(body.deviceID, "device_id", max: 128))
        guard !deviceID.isEmpty else { throw NodeError.invalid("device_id is required", field: "device_id") }
        let platform = try Self.text(body.platform, "platform", max: 16).lowercased()
        guard ["", "ios", "watchos"].contains(platform) else { throw NodeError.invalid("platform must be ios or watchos", field: "platform") }
        var capabilities: [String] = []
        let listed = body.capabilities ?? []
        guard listed.count <= 32 else { throw NodeError.invalid("capabilities holds at most 32 names", field: "capabilities") }
        for (i, item) in listed.enumerated() {
            guard let name = item.stringValue, DeviceNodes.commands.contains(name) else {
                throw NodeError.invalid("capabilities[\(i)] is not one of \(DeviceNodes.commands.joined(separator: ", "))", field: "capabilities")
            }
            if !capabilities.contains(name) { capabilities.append(name) }
        }
        var permissions: [String: String] = [:]
        for (key, value) in body.permissions ?? [:] {
            guard let text = value.stringValue else { throw NodeError.invalid("permissions.\(key) must be text", field: "permissions") }
            permissions[key] = text
        }
        let node = DeviceNodes.Node(
            deviceID: deviceID, subject: caller.subject, name: try Self.text(body.name, "name", max: 200), platform: platform.isEmpty ? "ios" : platform,
            model: try Self.text(body.model, "model", max: 200, inBytes: false), osVersion: try Self.text(body.osVersion, "os_version", max: 64, inBytes: false),
            appVersion: try Self.text(body.appVersion, "app_version", max: 64, inBytes: false), capabilities: capabilities, permissions: permissions, updatedAt: clock.now())
        return try await nodes.transactions.answer { session in
            let registered = try nodes.register(node, in: session)
            return .json(Registered(deviceID: registered.deviceID, pollIntervalSeconds: DeviceNodes.pollIntervalSeconds), status: 201)
        }
    }

    @Sendable func list(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return .json(NodeList(nodes: try await nodes.nodes(subject: caller.subject).map(DeviceNodes.NodeView.init), supportedCommands: DeviceNodes.commands))
    }

    @Sendable func pending(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return .json(["commands": try await nodes.pending(deviceID: request.parameter("device"), subject: caller.subject).map(DeviceNodes.CommandView.init)])
    }

    /// `POST …/nodes/:device/commands`: a command for a node (its id is the Idempotency-Key, else `id`).
    struct QueuedCommand: Decodable {
        var command: String
        var params: JSONValue?
        var id: String?
        var expiresAt: String?

        enum CodingKeys: String, CodingKey {
            case command
            case params
            case id
            case expiresAt = "expires_at"
        }
    }

    @Sendable func enqueue(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(QueuedCommand.self)
        let command = try body.command.limited(to: 64, field: "command")
        let params = body.params ?? .object([:])
        let id = request.header("idempotency-key") ?? body.id
        var expiresAt: Date?
        if let text = body.expiresAt, !text.isEmpty {
            guard let date = Self.rfc3339(text) else { throw NodeError.invalid("expires_at must be an RFC 3339 time", field: "expires_at") }
            expiresAt = date
        }
        return try await nodes.transactions.answer { session in
            let queued = try nodes.enqueue(deviceID: request.parameter("device"), subject: caller.subject, id: id, command: command, params: params,
                                           expiresAt: expiresAt, in: session)
            return .json(DeviceNodes.CommandView(queued), status: 201)
        }
    }

    nonisolated(unsafe) static let rfc3339Pattern = /([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))/

    /// An RFC 3339 time as Go's time.Parse(RFC3339) reads it: any offset up to ±23:59 (Foundation's ISO 8601 parser
    /// refuses some, such as +23:46), up to nine fraction digits.
    static func rfc3339(_ text: String) -> Date? {
        guard let m = text.wholeMatch(of: rfc3339Pattern) else { return nil }
        let (year, month, day, hour, minute, second) = (Int(m.1)!, Int(m.2)!, Int(m.3)!, Int(m.4)!, Int(m.5)!, Int(m.6)!)
        let offset = m.8 != nil ? 0 : (m.9 == "-" ? -1 : 1) * (Int(m.10 ?? "0")! * 3600 + Int(m.11 ?? "0")! * 60)
        guard (1...12).contains(month), hour < 24, minute < 60, second < 60, Int(m.10 ?? "0")! < 24, Int(m.11 ?? "0")! < 60 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let date = calendar.date(from: DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second)),
              calendar.component(.day, from: date) == day else { return nil }
        let instant = date.addingTimeInterval((m.7.flatMap { Double("0" + $0) } ?? 0) - Double(offset))
        // An offset may carry year 0000 or 9999 past what a timestamp can be written as (Go's encoder refuses it too).
        return JSONValue.writableDates.contains(instant) ? instant : nil
    }

    @Sendable func get(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return .json(DeviceNodes.CommandView(try await nodes.command(id: request.parameter("id"), deviceID: request.parameter("device"), subject: caller.subject)))
    }

    @Sendable func claim(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return try await nodes.transactions.answer { session in
            .json(DeviceNodes.CommandView(try nodes.claim(id: request.parameter("id"), deviceID: request.parameter("device"), subject: caller.subject,
                                                          in: session)))
        }
    }

    /// `POST …/commands/:id/result`: how a claimed command ended.
    struct CommandOutcome: Decodable {
        var status: String
        var error: String?
        var result: JSONValue?
    }

    @Sendable func result(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let outcome = try request.decode(CommandOutcome.self)
        let (status, error, result) = (try outcome.status.limited(to: 16, field: "status"), outcome.error, outcome.result)
        return try await nodes.transactions.answer { session in
            .json(DeviceNodes.CommandView(try nodes.finish(id: request.parameter("id"), deviceID: request.parameter("device"), subject: caller.subject,
                                                           status: DeviceNodes.CommandStatus(rawValue: status), result: result, error: error, in: session)))
        }
    }
}

extension NodeError: HTTPResponseError {
    /// The original's statuses and texts (SOULACY-CONTRACT.md §12).
    public var apiError: APIError {
        switch self {
        case .notFound: APIError(status: 404, code: "not_found", message: description)
        case .conflict: APIError(status: 409, code: "conflict", message: description)
        case .invalid(_, let field): APIError(status: 400, code: "invalid_field", message: description, field: field)
        case .queueFull: APIError(status: 409, code: "queue_full", message: description)
        }
    }
}

// MARK: Answers, in the original's field names

extension DeviceNodesAPI {
    struct Registered: Encodable {
        var registered = true
        var deviceID: String
        var pollIntervalSeconds: Int
        var foregroundOnly = true

        enum CodingKeys: String, CodingKey {
            case registered
            case deviceID = "device_id", pollIntervalSeconds = "poll_interval_seconds", foregroundOnly = "foreground_only"
        }
    }

    struct NodeList: Encodable {
        var nodes: [DeviceNodes.NodeView]
        var supportedCommands: [String]

        enum CodingKeys: String, CodingKey {
            case nodes
            case supportedCommands = "supported_commands"
        }
    }
}
