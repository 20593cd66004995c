import Storage
import Agents
import APIKit
import ChannelAPI
import Crypto
import Foundation
import Identity
import Mobile

/// Location triggers for phones and webhook triggers for anything that can POST.
public struct TriggersAPI: Sendable {
    static let maximumRegions = 20

    let catalog: AgentCatalog
    let runs: AgentRuns
    let mobile: MobileStorage
    let cooldowns: any TriggerCooldownStore
    let clock: any WallClock

    public init(catalog: AgentCatalog, runs: AgentRuns, mobile: MobileStorage, cooldowns: any TriggerCooldownStore, clock: any WallClock) {
        self.catalog = catalog
        self.runs = runs
        self.mobile = mobile
        self.cooldowns = cooldowns
        self.clock = clock
    }

    public var routes: [Route] {
        [
            Route(.GET, "/api/v1/mobile/triggers", access: .role(.viewer), summary: "Location triggers this phone should monitor", handler: list),
            Route(.POST, "/api/v1/mobile/triggers/:id/fire", role: .operator, summary: "Report a region crossing", handler: fire),
            Route(.POST, "/hooks/:id", access: .open, summary: "Run a webhook agent (its secret in X-Soulacy-Secret)", handler: webhook),
            Route(.POST, "/api/v1/webhooks/:id", role: .operator, summary: "Run a webhook or chat agent with any JSON and answer with its reply (Soulacy's webhook)",
                  handler: soulacyWebhook),
        ]
    }

    static func allows(_ trigger: LocationTrigger, device: String) -> Bool {
        trigger.devices.isEmpty || trigger.devices.contains(device)
    }

    @Sendable func list(_ request: HTTPRequest) async throws -> HTTPResponse {
        // As the original: device_id is optional and only filters (a trigger bound to other phones is left out).
        let device = request.query["device_id"].map(SchemaWhitespace.trim).flatMap { $0.isEmpty ? nil : $0 }
        let triggers = catalog.current.agents.compactMap { agent -> Region? in
            guard agent.isOn, agent.trigger == .location, let location = agent.location else { return nil }
            if let device, !Self.allows(location, device: device) { return nil }
            return Region(agentID: agent.id, agentName: agent.name, name: location.name, latitude: location.latitude, longitude: location.longitude,
                          radiusM: location.radiusMeters, on: location.on.rawValue, cooldown: DurationText.format(location.cooldown),
                          device: location.devices.isEmpty ? nil : location.devices.joined(separator: ","))
        }
        var response = HTTPResponse.json(Regions(triggers: Array(triggers.prefix(Self.maximumRegions)), maxRegions: Self.maximumRegions))
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    /// A wait as Go prints a duration, which the original app reads: "29m41s", "1h0m5s", "45s".
    static func goDuration(seconds: Int) -> String {
        let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60)
        if h > 0 { return "\(h)h\(m)m\(s)s" }
        if m > 0 { return "\(m)m\(s)s" }
        return "\(s)s"
    }

    /// `POST /api/v1/mobile/triggers/:id/fire`: what the phone saw (`enter`/`exit`), where, and which phone it is.
    struct FireRequest: Decodable {
        var event: String?
        var deviceID: String?
        var latitude: Double?
        var longitude: Double?
        var accuracyM: Double?
        var regionName: String?

        enum CodingKeys: String, CodingKey {
            case event
            case deviceID = "device_id"
            case latitude
            case longitude
            case accuracyM = "accuracy_m"
            case regionName = "region_name"
        }
    }

    @Sendable func fire(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let agentID = request.parameter("id")
        // Checked in the original's order: the agent, the body, the event, then the phone.
        if SoulConfigLoader.reservedAgentIDs.contains(agentID) { throw APIError.forbidden("the System agent is protected") }
        guard let agent = catalog.agent(id: agentID) else { throw APIError.notFound("agent not found") }
        guard agent.isOn, agent.trigger == .location, let location = agent.location else {
            throw APIError.conflict("agent does not have an enabled location trigger", code: "not_a_location_trigger")
        }
        let body = try request.decode(FireRequest.self)
        guard let eventText = body.event.map({ SchemaWhitespace.trim($0).lowercased() }) else { throw APIError.missingField("event") }
        guard let event = LocationTrigger.Event(rawValue: eventText) else { throw APIError.invalidField("event", "must be \"enter\" or \"exit\", got \"\(eventText)\"") }
        guard event == location.on else {
            return .json(Ignored(reason: "agent runs on \(location.on.rawValue), not \(event.rawValue)"), status: 202)
        }
        // Beyond the original: the phone must be the caller's, since the reply is delivered to it.
        let device = try await mobile.devices.ownedDevice(try body.deviceID.limited(to: 128, field: "device_id").map(SchemaWhitespace.trim), subject: caller.subject)
        let (latitude, longitude) = (body.latitude, body.longitude)
        if let latitude, !(-90...90).contains(latitude) { throw APIError.invalidField("latitude", "must be from -90 to 90") }
        if let longitude, !(-180...180).contains(longitude) { throw APIError.invalidField("longitude", "must be from -180 to 180") }
        let accuracy = body.accuracyM
        let region = try body.regionName.limited(to: 200, field: "region_name") ?? location.name

        guard Self.allows(location, device: device.id) else {
            throw APIError(status: 403, code: "device_not_allowed", message: "device_id: \(device.id) is not one of the devices this trigger allows", field: "device_id")
        }
        if await runs.isRunning(agentID) {
            throw APIError.conflict("agent is already running", code: "already_running")
        }
        if let wait = try await cooldowns.claim(agentID: agentID, deviceID: device.id, cooldown: location.cooldown, now: clock.now()) {
            return .json(Ignored(reason: "cooldown", retryAfter: Self.goDuration(seconds: Int(wait))), status: 202)
        }
        var input: [String: JSONValue] = ["event": .string(event.rawValue), "region_name": .string(region), "device_id": .string(device.id)]
        if let latitude { input["latitude"] = .number(latitude) }
        if let longitude { input["longitude"] = .number(longitude) }
        if let accuracy { input["accuracy_m"] = .number(accuracy) }
        let destination = RunDestination(channel: "mobile", to: "device:\(device.id)",
                                         metadata: ["location.event": event.rawValue, "location.name": location.name])
        do {
            // The original's session for a location run: location-<agent>-<unix nanoseconds>.
            let session = "location-\(agentID)-\(Int64(clock.now().timeIntervalSince1970 * 1e9))"
            let started = try await runs.start(agentID: agentID, input: JSONValue.object(input).serialized(), trigger: .location,
                                               output: .to(destination), subject: caller.subject, sessionID: session,
                                               answer: { GatewayAPI.startedAnswer($0).committedAnswer })
            return GatewayAPI.startedAnswer(started)
        } catch {
            try? await cooldowns.release(agentID: agentID, deviceID: device.id)
            throw APIError.runRefused(error)
        }
    }

    @Sendable func webhook(_ request: HTTPRequest) async throws -> HTTPResponse {
        let agentID = request.parameter("id")
        // The same refusal for an unknown hook and a wrong secret: a caller learns nothing by guessing ids.
        let presented = request.header("x-soulacy-secret")
            ?? request.header("authorization").flatMap { $0.lowercased().hasPrefix("bearer ") ? String($0.dropFirst(7)) : nil } ?? ""
        let expected = catalog.agent(id: agentID)?.webhook?.secretSHA256 ?? SHA256.hash("no hook: \(agentID)")
        guard SecureBytes.constantTimeEqual(SHA256.hash(presented), expected), let agent = catalog.agent(id: agentID), let hook = agent.webhook else {
            var error = APIError.unauthorized("the webhook secret is wrong or the hook does not exist")
            error.extraHeaders["WWW-Authenticate"] = "Bearer"
            throw error
        }
        let input = String(decoding: request.body, as: UTF8.self)
        do {
            let started = try await runs.start(agentID: agent.id, input: input, trigger: .webhook, output: .declared(hook.output, metadata: ["trigger": "webhook"]))
            return GatewayAPI.startedAnswer(started)
        } catch {
            throw APIError.runRefused(error)
        }
    }

    /// The text a Soulacy webhook run reads: `webhook.text_path`, else the first of the usual fields, else the compact JSON.
    static func webhookText(_ body: JSONValue, textPath: String?) -> String {
        func at(_ path: String) -> String? {
            var node: JSONValue? = body
            for key in path.split(separator: ".") { node = node?[String(key)] }
            if let text = node?.stringValue { return text }
            if let number = node?.numberValue { return number.formatted(.number.grouping(.never)) }
            return nil
        }
        if let textPath, let text = at(textPath) { return text }
        for path in ["text", "message", "body", "content", "title", "summary", "description", "issue.title", "alert.title"] {
            if let text = at(path), !text.isEmpty { return text }
        }
        return body.serialized()
    }

    @Sendable func soulacyWebhook(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let agentID = request.parameter("id")
        guard let agent = catalog.agent(id: agentID), !SoulConfigLoader.reservedAgentIDs.contains(agentID) else {
            throw APIError.notFound("no agent '\(agentID)'")
        }
        guard agent.trigger == .webhook || agent.trigger == .channel else {
            throw APIError.conflict("agent '\(agentID)' is not a webhook or chat agent (its trigger is \(agent.trigger.rawValue))", code: "not_a_webhook_agent")
        }
        let body = request.body.isEmpty ? JSONValue.object([:]) : try JSONValue.parse(request.body)
        let text = Self.webhookText(body, textPath: agent.webhook?.textPath)
        return try await runs.runToEnd(agentID: agentID, input: text, trigger: .webhook, output: .declared(agent.webhook?.output, metadata: ["trigger": "webhook"]),
                                       subject: caller.subject) { record in
            let reply = record.reply ?? ""
            return .json(WebhookReply(reply: reply, parts: [AssistantAPI.TextPart(text: reply)], sessionID: record.sessionID, userID: caller.subject,
                                      runID: record.id))
        }.response
    }
}

// MARK: Answers, in the original's field names

extension TriggersAPI {
    /// One region the phone watches.
    struct Region: Encodable {
        var agentID, agentName, name: String
        var latitude, longitude, radiusM: Double
        var on, cooldown: String
        /// The phones it is bound to, comma-separated; left out when any phone may fire it.
        var device: String?

        enum CodingKeys: String, CodingKey {
            case name, latitude, longitude, on, cooldown, device
            case agentID = "agent_id", agentName = "agent_name", radiusM = "radius_m"
        }
    }

    struct Regions: Encodable {
        var triggers: [Region]
        var maxRegions: Int

        enum CodingKeys: String, CodingKey {
            case triggers
            case maxRegions = "max_regions"
        }
    }

    /// A fire that ran nothing: the wrong event, or a cooldown (`retry_after` as Go prints a duration).
    struct Ignored: Encodable {
        var ok = true
        var ignored = true
        var reason: String
        var retryAfter: String?

        enum CodingKeys: String, CodingKey {
            case ok, ignored, reason
            case retryAfter = "retry_after"
        }
    }

    /// The original's webhook-agent reply.
    struct WebhookReply: Encodable {
        var reply: String
        var parts: [AssistantAPI.TextPart]
        var sessionID: String
        var threadID = ""
        var userID, runID: String

        enum CodingKeys: String, CodingKey {
            case reply, parts
            case sessionID = "session_id", threadID = "thread_id", userID = "user_id", runID = "run_id"
        }
    }
}
