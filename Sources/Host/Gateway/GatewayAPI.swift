import ChannelAPI
import Foundation
import HTTPServer
import Identity
import Mobile
import SQLite

/// The host's own routes: health, agents and runs, and API-key administration.
struct GatewayAPI: Sendable {
    let catalog: AgentCatalog
    let runs: AgentRuns
    let runStore: RunStore
    let keys: APIKeyStore
    let mobile: MobileStore
    let scheduler: Scheduler
    let clock: any WallClock
    /// Told of every revoked key (the relay carriage forgets the phone).
    var revoked: @Sendable (String) async -> Void = { _ in }

    var routes: [Route] {
        [
            Route(.GET, "/health", access: .open, summary: "Liveness and version", handler: health),
            Route(.GET, "/api/v1/agents", access: .role(.viewer), summary: "Agents from SOUL.yaml (System hidden)", handler: listAgents),
            Route(.POST, "/api/v1/agents/:id/run", access: .role(.operator), summary: "Run an agent now", handler: runAgent),
            Route(.GET, "/api/v1/runs/:id", access: .role(.viewer), summary: "A run's status", handler: getRun),
            Route(.POST, "/api/v1/runs/:id/events", access: .role(.operator), summary: "A running command reports progress (a tool call)", handler: runEvent),
            Route(.POST, "/admin/api-keys", access: .role(.admin), summary: "Mint an API key", handler: createKey),
            Route(.GET, "/admin/api-keys", access: .role(.admin), summary: "List API keys (never their secrets)", handler: listKeys),
            Route(.DELETE, "/admin/api-keys/:id", access: .role(.admin), summary: "Revoke an API key", handler: revokeKey),
        ]
    }

    @Sendable func health(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(.object(["ok": .bool(true), "service": .string("soulacy"), "version": .string(GatewayVersion.current)]))
    }

    @Sendable func listAgents(_ request: HTTPRequest) async throws -> HTTPResponse {
        let next = scheduler.nextFires(after: clock.now())
        var agents: [JSONValue] = []
        for agent in catalog.current.visibleAgents {
            var entry: [String: JSONValue] = [
                "id": .string(agent.id), "name": .string(agent.name), "trigger": .string(agent.trigger.rawValue),
                "description": agent.description.map(JSONValue.string) ?? .null,
                "running": .bool(await runs.isRunning(agent.id)), "enabled": .bool(agent.isOn),
            ]
            if let s = agent.schedule, s.cron != nil || s.at != nil {
                var schedule: [String: JSONValue] = [
                    "cron": s.cron.map { .string($0.expression) } ?? .null, "timezone": .string(s.timeZone.identifier),
                    "next_run_at": next[agent.id].map { JSONValue.timestamp($0) } ?? .null,
                ]
                if let at = s.at { schedule["at"] = .timestamp(at) }
                entry["schedule"] = .object(schedule)
            }
            agents.append(.object(entry))
        }
        return .json(.object(["agents": .array(agents)]))
    }

    @Sendable func runAgent(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let body = try JSONObject(body: request.body, allowEmpty: true)
        let input = try body.optionalString("input", maxLength: 100_000) ?? ""
        let agentID = request.parameter("id")
        guard let agent = catalog.agent(id: agentID), !SoulConfigLoader.reservedAgentIDs.contains(agentID) else {
            throw APIError.notFound("no agent '\(agentID)'")
        }
        var destination = agent.schedule?.output.map { RunDestination($0) }
            ?? RunDestination(channel: "mobile", to: "user:\(caller.subject)")
        if let to = try body.optionalString("to") {
            do { _ = try Destination(parsing: to) } catch { throw APIError.invalidField("to", error.description) }
            guard caller.role == .admin || to == "user:\(caller.subject)" else {
                throw APIError(status: 403, code: "forbidden", message: "to: only an admin may send a run's reply to \(to)", field: "to")
            }
            destination = RunDestination(channel: "mobile", to: to)
        }
        let started: StartedRun
        switch await startRun(agentID: agentID, input: input, destination: destination, subject: caller.subject) {
        case .success(let run): started = run
        case .failure(let error):
            throw APIError.runRefused(error)
        }
        return .json(.object(["ok": .bool(true), "run_id": .string(started.runID), "session_id": .string(started.sessionID),
                              "agent_id": .string(agentID)]), status: 202)
    }

    private func startRun(agentID: String, input: String, destination: RunDestination, subject: String) async -> Result<StartedRun, RunStartError> {
        do {
            return .success(try await runs.start(agentID: agentID, input: input, trigger: "api", destination: destination, subject: subject))
        } catch {
            return .failure(error)
        }
    }

    @Sendable func getRun(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let id = request.parameter("id")
        let wait = try request.queryFlag("wait")
        // A run is its person's, like their inbox: another key (even an admin's) learns nothing, not even that it exists.
        // A run just started may not be stored yet: then the run in flight says whose it is.
        var owner = try runStore.run(id: id)?.subject
        if owner == nil { owner = await runs.activityRun(runID: id)?.subject }
        guard owner == caller.subject else { throw APIError.notFound("no run \(id) of yours") }
        if wait { _ = await runs.wait(runID: id) }
        guard let run = try runStore.run(id: id) else { throw APIError.notFound("no run \(id) of yours") }
        return .json(.object([
            "id": .string(run.id), "agent_id": .string(run.agentID), "session_id": .string(run.sessionID),
            "trigger": .string(run.trigger), "status": .string(run.status.rawValue),
            "started_at": JSONValue.timestamp(run.startedAt), "finished_at": run.finishedAt.map(JSONValue.timestamp) ?? .null,
            "error": run.error.map(JSONValue.string) ?? .null, "delivery_id": run.deliveryID.map(JSONValue.string) ?? .null,
            "note": run.note.map(JSONValue.string) ?? .null,
        ]))
    }

    @Sendable func runEvent(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let runID = request.parameter("id")
        guard let run = await runs.activityRun(runID: runID), run.subject == caller.subject,
              !caller.keyID.hasPrefix("run:") || caller.keyID == "run:\(runID)" else {
            throw APIError.notFound("no running run \(runID) of yours")
        }
        let body = try JSONObject(body: request.body)
        let type = try body.string("type")
        guard type == "tool" else { throw APIError.invalidField("type", "must be \"tool\" (a tool call), got \"\(type)\"") }
        let tool = try body.string("tool", maxLength: 100)
        guard !tool.isEmpty, tool.allSatisfy({ $0.isLetter || $0.isNumber || "._-".contains($0) }) else {
            throw APIError.invalidField("tool", "must be a tool name (letters, digits, . _ -)")
        }
        await runs.liveActivities?.toolCalled(sessionID: run.sessionID, tool: tool)
        return .json(["ok": true])
    }

    static func json(_ key: APIKey) -> JSONValue {
        .object([
            "id": .string(key.id), "name": .string(key.name), "subject": .string(key.subject), "role": .string(key.role.rawValue),
            "kind": .string(key.kind.rawValue), "created_at": JSONValue.timestamp(key.createdAt),
            "revoked_at": key.revokedAt.map(JSONValue.timestamp) ?? .null,
        ])
    }

    @Sendable func createKey(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let body = try JSONObject(body: request.body)
        let name = try body.string("name", maxLength: 200)
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty else { throw APIError.invalidField("name", "must not be empty") }
        let roleText = try body.optionalString("role") ?? Role.viewer.rawValue
        guard let role = Role(rawValue: roleText) else {
            throw APIError.invalidField("role", "must be admin, operator or viewer, got \"\(roleText)\"")
        }
        let subject = try body.optionalString("subject", maxLength: 64) ?? caller.subject
        guard !subject.isEmpty, subject.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }) else {
            throw APIError.invalidField("subject", "must be 1-64 lower-case letters, digits, - or _")
        }
        let minted = try keys.mint(name: name, subject: subject, role: role, kind: .manual)
        guard case .object(var fields) = Self.json(minted.key) else { throw APIError.internal("key encoding") }
        fields["key"] = .string(minted.token)
        return .json(.object(fields), status: 201)
    }

    @Sendable func listKeys(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(.object(["keys": .array(try keys.list().map(Self.json))]))
    }

    @Sendable func revokeKey(_ request: HTTPRequest) async throws -> HTTPResponse {
        let id = request.parameter("id")
        guard try keys.revoke(id: id) else { throw APIError.notFound("no active key \(id)") }
        // Revoking a phone's key unpairs it: its next call is 401 and it gets no more wake-ups.
        try mobile.removeDevices(registeredByKey: id)
        // And through the relay: no more sealed records for it, and the relay drops its place and bearer.
        await revoked(id)
        return .noContent
    }
}

public enum GatewayVersion {
    public static let current = "0.1.0"
}

extension APIError {
    /// A run that could not start: a missing agent is 404, a running or disabled one 409.
    static func runRefused(_ error: RunStartError) -> APIError {
        switch error {
        case .unknownAgent: return .notFound(error.description)
        case .alreadyRunning: return .conflict(error.description, code: "already_running")
        case .disabled: return .conflict(error.description, code: "agent_disabled")
        }
    }
}
