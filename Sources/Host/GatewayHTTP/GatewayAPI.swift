import Storage
import Agents
import APIKit
import ChannelAPI
import ChannelDelivery
import Crypto
import Foundation
import Identity
import Mobile
import RelayCarriage
import Synchronization

/// The host's own routes: health and readiness, agents and runs.
public struct GatewayAPI: Sendable {
    let catalog: AgentCatalog
    let runs: AgentRuns
    let runStore: any RunStore
    let mobile: MobileStorage
    let scheduler: Scheduler
    let clock: any WallClock
    /// The wake-up transports configured (apns, relay, fcm, …), for the readiness check.
    var transportNames: [String] = []
    /// This process's name among the gateway's nodes, shown by the health check.
    public var nodeID = ""
    /// The relay carriage's state for the console's health page (nil: no relay configured).
    public var relayStatus: @Sendable () async -> RelayCarriage.Status? = { nil }
    /// For each channel that disables endpoints its service says are gone, the ones disabled now (the console's
    /// health page); a channel that never disables one is not a key.
    public var disabledEndpoints: @Sendable () async throws -> [String: [DisabledEndpoint]] = { [:] }

    public init(catalog: AgentCatalog, runs: AgentRuns, runStore: any RunStore, mobile: MobileStorage, scheduler: Scheduler, clock: any WallClock, transportNames: [String] = []) {
        self.catalog = catalog
        self.runs = runs
        self.runStore = runStore
        self.mobile = mobile
        self.scheduler = scheduler
        self.clock = clock
        self.transportNames = transportNames
    }

    public var routes: [Route] {
        [
            Route(.GET, "/health", access: .open, summary: "Liveness and version", handler: health).flagged(.keylessOnSameWiFi),
            Route(.GET, "/ping", access: .open, summary: "Reachability, as the original's pin probe reads it", handler: ping).flagged(.keylessOnSameWiFi),
            Route(.GET, "/api/v1/health", access: .role(.viewer), summary: "Health with dependencies (the original's shape)", handler: apiHealth).flagged(.keylessOnSameWiFi),
            Route(.GET, "/api/v1/mobile/status", role: .viewer, summary: "Is the phone set up: devices, wake-ups, agents that deliver", handler: mobileStatus),
            Route(.GET, "/api/v1/agents", access: .role(.viewer), summary: "Every loaded agent as the original lists them, disabled ones with enabled false (System hidden)", handler: listAgents),
            // The seed's shorthand the watch calls: the same list (the original has no root alias).
            Route(.GET, "/agents", access: .role(.viewer), summary: "The agents list (watch shorthand of /api/v1/agents)", handler: listAgents),
            Route(.POST, "/api/v1/agents/:id/run", role: .operator, summary: "Run an agent now", handler: runAgent),
            Route(.POST, "/api/v1/agents/:id/trigger", role: .operator, summary: "Run an agent now and answer with its result (the original's synchronous trigger)", handler: triggerAgent),
            Route(.GET, "/api/v1/runs/:id", role: .viewer, summary: "A run's status", handler: getRun),
            Route(.POST, "/api/v1/runs/:id/events", role: .operator, summary: "A running command reports progress (a tool call)", handler: runEvent),
        ] + consoleRoutes
    }

    @Sendable func health(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(Health(version: GatewayVersion.current))
    }

    @Sendable func ping(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(["status": "ok", "auth": "required", "mode": "apikey"] as [String: String])
    }

    @Sendable func apiHealth(_ request: HTTPRequest) async throws -> HTTPResponse {
        let database: String
        do {
            try await mobile.transactions.checkReadable()
            database = "ok"
        } catch {
            database = "failing: \(error)"
        }
        return .json(APIHealth(status: database == "ok" ? "ok" : "degraded", version: GatewayVersion.current, timestamp: Timestamp(clock.now()),
                               deps: .init(database: database, agents: catalog.current.visibleAgents.filter(\.isOn).count),
                               requestID: RequestContext.current?.requestID ?? RequestID.fresh(), node: nodeID, engine: mobile.transactions.engine))
    }

    /// The companion's readiness, in the original's shape: each check ok, warn or fail, with what to do next.
    @Sendable func mobileStatus(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let devices = try await mobile.devices.list(subject: caller.subject)
        let notified = devices.filter { $0.wakeTarget != nil }
        let delivering = catalog.current.visibleAgents.filter { $0.isOn && $0.schedule?.output?.channel == "mobile" }
        var checks: [Readiness.Check] = []
        var actions: [String] = []
        func check(_ key: String, _ label: String, _ status: String, _ detail: String, action: String? = nil) {
            checks.append(Readiness.Check(key: key, label: label, status: status, detail: detail))
            if status != "ok", let action { actions.append(action) }
        }
        check("devices", "A phone is registered", devices.isEmpty ? "fail" : "ok",
              devices.isEmpty ? "no phone is registered to you" : "\(devices.count) phone(s) registered", action: "Pair a phone and open the Soulacy app")
        check("push", "Wake-ups can reach a phone", transportNames.isEmpty ? "warn" : (notified.isEmpty ? "warn" : "ok"),
              transportNames.isEmpty ? "no push transport is configured; the inbox still fills" : notified.isEmpty ? "no phone has notifications on with a push token" : "through \(transportNames.joined(separator: ", "))",
              action: transportNames.isEmpty ? "Configure APNs, FCM or a relay" : "Allow notifications in the app")
        check("agents", "Agents deliver to phones", delivering.isEmpty ? "warn" : "ok",
              delivering.isEmpty ? "no enabled agent's schedule.output is the mobile channel" : delivering.map(\.id).joined(separator: ", "),
              action: "Add output: {channel: mobile, to: all} to an agent's schedule")
        let statuses = checks.map(\.status)
        let ready = statuses.filter { $0 == "ok" }.count
        let overall = statuses.contains("fail") ? "fail" : statuses.contains("warn") ? "warn" : "ok"
        return .json(Readiness(status: overall, score: ready * 100 / max(statuses.count, 1), ready: ready, total: statuses.count, devices: devices.count,
                               checks: checks, nextActions: actions))
    }

    @Sendable func listAgents(_ request: HTTPRequest) async throws -> HTTPResponse {
        let next = await scheduler.nextFires(after: clock.now())
        let surface = request.query["surface"]?.trimmingCharacters(in: .whitespaces).lowercased()
        var agents: [AgentDefinition] = []
        var interfaces: [String: AgentList.Interface] = [:]
        // As both originals' list handler: every loaded agent, a disabled one with "enabled": false.
        for agent in catalog.current.visibleAgents {
            let surfaces = agent.effectiveSurfaces
            if let surface, !surface.isEmpty, !surfaces.contains(where: { $0.lowercased() == surface }) { continue }
            agents.append(AgentDefinition(agent, next: next[agent.id], running: await runs.isRunning(agent.id)))
            interfaces[agent.id] = AgentList.Interface(surfaces: surfaces, chatEligible: surfaces.contains("chat"))
        }
        return .json(AgentList(agents: agents, count: agents.count, interfaces: interfaces))
    }

    /// The original's `POST /agents/:id/trigger`: runs now, waits, answers `{result, delivered}`.
    @Sendable func triggerAgent(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let agentID = request.parameter("id")
        guard let agent = catalog.agent(id: agentID), !SoulConfigLoader.reservedAgentIDs.contains(agentID) else {
            throw APIError.notFound("agent not found")
        }
        return try await runs.runToEnd(agentID: agentID, input: "", trigger: .api, output: .manual(),
                                       subject: caller.subject, failureStatus: 500) { record in
            .json(Triggered(result: record.reply ?? "", delivered: record.deliveryID != nil, runID: record.id, sessionID: record.sessionID))
        }.response
    }

    /// `POST /api/v1/agents/:id/run`: the run's input, and (an admin's choice) where its reply goes.
    struct RunRequestBody: Decodable {
        var input: String?
        var to: String?
    }

    @Sendable func runAgent(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(RunRequestBody.self, allowEmpty: true)
        let input = try body.input.limited(to: 100_000, field: "input") ?? ""
        let agentID = request.parameter("id")
        guard let agent = catalog.agent(id: agentID), !SoulConfigLoader.reservedAgentIDs.contains(agentID) else {
            throw APIError.notFound("no agent '\(agentID)'")
        }
        // Without a target of its own, the reply comes to the caller's phones.
        var output = RunOutput.manual(otherwise: RunDestination(channel: "mobile", to: "user:\(caller.subject)"))
        if let to = body.to {
            do { _ = try Destination(parsing: to) } catch { throw APIError.invalidField("to", error.description) }
            guard caller.role == .admin || to == "user:\(caller.subject)" else {
                throw APIError(status: 403, code: "forbidden", message: "to: only an admin may send a run's reply to \(to)", field: "to")
            }
            output = .to(RunDestination(channel: "mobile", to: to))
        }
        let started: StartedRun
        switch await startRun(agentID: agentID, input: input, output: output, subject: caller.subject) {
        case .success(let run): started = run
        case .failure(let error):
            throw APIError.runRefused(error)
        }
        return Self.startedAnswer(started)
    }

    /// The 202 for a started run; known before the run's record commits, so it is recorded with it.
    static func startedAnswer(_ started: StartedRun) -> HTTPResponse {
        .json(Started(runID: started.runID, sessionID: started.sessionID, agentID: started.agentID), status: 202)
    }

    private func startRun(agentID: String, input: String, output: RunOutput, subject: String) async -> Result<StartedRun, RunStartError> {
        do {
            return .success(try await runs.start(agentID: agentID, input: input, trigger: .api, output: output, subject: subject,
                                                 answer: { Self.startedAnswer($0).committedAnswer }))
        } catch {
            return .failure(error)
        }
    }

    @Sendable func getRun(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let id = request.parameter("id")
        let wait = try request.queryFlag("wait")
        // A run is its person's, like their inbox: another key (even an admin's) learns nothing, not even that it exists.
        // A run just started may not be stored yet: then the run in flight says whose it is.
        var owner = try await runStore.run(id: id)?.subject
        if owner == nil { owner = await runs.activityRun(runID: id)?.subject }
        guard owner == caller.subject else { throw APIError.notFound("no run \(id) of yours") }
        if wait { _ = await runs.wait(runID: id) }
        guard let run = try await runStore.run(id: id) else { throw APIError.notFound("no run \(id) of yours") }
        var view = RunView(run)
        view.events = try await runStore.events(runID: run.id).map { EventView(at: Timestamp($0.at), kind: $0.kind, detail: $0.detail) }
        view.outputs = try await outputs(of: run)
        return .json(view)
    }

    /// Each output's path: the phones' inbox takes it whole at the run's end; every other channel's send has its
    /// own state in the durable hand-off.
    func outputs(of run: RunRecord) async throws -> [OutputView] {
        var outputs: [OutputView] = []
        if let delivery = run.deliveryID, delivery.hasPrefix("dlv_") {
            outputs.append(OutputView(id: delivery, channel: "mobile", destination: nil, state: "delivered", attempts: 1, lastReason: Nullable(nil),
                                      deliveredAt: Nullable(run.finishedAt.map(Timestamp.init))))
        }
        for send in try await runs.channelOutbox?.entries(runID: run.id) ?? [] {
            outputs.append(OutputView(id: send.id, channel: send.channel, destination: DestinationSeal.display(send.destination), state: send.state.rawValue,
                                      attempts: send.attempts, lastReason: Nullable(send.lastReason), deliveredAt: Nullable(send.deliveredAt.map(Timestamp.init))))
        }
        return outputs
    }

    /// `POST /api/v1/runs/:id/events`: a tool call a running command reports.
    struct RunEvent: Decodable {
        var type: String
        var tool: String
    }

    @Sendable func runEvent(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let runID = request.parameter("id")
        guard let run = await runs.activityRun(runID: runID), run.subject == caller.subject,
              !caller.keyID.hasPrefix("run:") || caller.keyID == "run:\(runID)" else {
            throw APIError.notFound("no running run \(runID) of yours")
        }
        let event = try request.decode(RunEvent.self)
        guard event.type == "tool" else { throw APIError.invalidField("type", "must be \"tool\" (a tool call), got \"\(event.type)\"") }
        let tool = try event.tool.limited(to: 100, field: "tool")
        guard !tool.isEmpty, tool.allSatisfy({ $0.isLetter || $0.isNumber || "._-".contains($0) }) else {
            throw APIError.invalidField("tool", "must be a tool name (letters, digits, . _ -)")
        }
        // The answer is known before the Live Activity's update is queued: it commits with it.
        let answer = HTTPResponse.json(["ok": true])
        CommitHook.current?.answerWithNextEffect(answer.committedAnswer)
        await runs.progress?.toolCalled(sessionID: run.sessionID, tool: tool)
        return answer
    }
}

public enum GatewayVersion {
    public static let current = "0.1.0"
}

extension APIError {
    /// A run that could not start: a missing agent is 404, a running or disabled one 409, too many conversations 429.
    static func runRefused(_ error: RunStartError) -> APIError {
        switch error {
        case .unknownAgent: return .notFound(error.description)
        case .alreadyRunning, .alreadyFired: return .conflict(error.description, code: "already_running")
        case .disabled: return .conflict(error.description, code: "agent_disabled")
        case .busy: return APIError(status: 429, code: "busy", message: error.description)
        }
    }
}

extension AgentRuns {
    /// Starts a run and waits for it, as the synchronous routes (chat, trigger, webhooks) answer: a refusal is the
    /// API's answer for it, a finished run `answer(record)`, and a failed run `failureStatus` with the run's error.
    ///
    /// Under an Idempotency-Key the answer commits with the run's end, so a retry after a crash gets it; a run the
    /// crash interrupted is answered as failed (`resumer`), never run twice.
    func runToEnd(agentID: String, input: String, trigger: RunTrigger, output: RunOutput, subject: String,
                  chat: ChatContext? = nil, failureStatus: Int = 502,
                  answer: @escaping @Sendable (RunRecord) -> HTTPResponse) async throws -> (response: HTTPResponse, record: RunRecord) {
        // Built once, when the run ends: the recorded answer and the one sent are the same bytes.
        let built = Mutex<HTTPResponse?>(nil)
        let respond: @Sendable (RunRecord) -> HTTPResponse = { record in
            let response = record.status == .succeeded ? answer(record) : Self.failedRunAnswer(record, status: failureStatus)
            built.withLock { $0 = response }
            return response
        }
        let runID = chat?.runID ?? AgentRuns.newRunID()
        CommitHook.current?.resume(from: AnswerResumer.reference(kind: Self.runResumeKind, String(failureStatus), runID))
        let started: StartedRun
        do {
            started = try await start(agentID: agentID, input: input, trigger: trigger, output: output, subject: subject, chat: chat,
                                runID: runID, finishAnswer: { respond($0).committedAnswer })
        } catch {
            throw APIError.runRefused(error)
        }
        guard let record = await wait(runID: started.runID) else { throw APIError.internal("the run vanished") }
        return (built.withLock { $0 } ?? respond(record), record)
    }

    static func failedRunAnswer(_ record: RunRecord, status: Int) -> HTTPResponse {
        APIError(status: status, code: "agent_failed", message: "the agent did not answer: \(record.error ?? "unknown error")").response
    }

    static let runResumeKind = "run"

    /// A waited-for run whose answer was never recorded (`<failure status>/<run id>`): the process died during the
    /// run, since a finished run's answer commits with its end. Its record says interrupted; the retry hears the
    /// route's failure for it.
    public static func interruptedRunResumer(store: any RunStore) -> AnswerResumer {
        AnswerResumer(kind: runResumeKind) { id, caller in
            guard let (statusText, runID) = AnswerResumer.parts(of: id), let status = Int(statusText),
                  let record = try await store.run(id: runID), record.subject == caller.subject, record.status != .running, record.status != .succeeded
            else { return nil }
            return failedRunAnswer(record, status: status)
        }
    }
}

// MARK: Answers, in the original's field names

extension GatewayAPI {
    struct Health: Encodable {
        var ok = true
        var service = "soulacy"
        var version: String
    }

    struct APIHealth: Encodable {
        struct Dependencies: Encodable {
            var database: String
            var agents: Int
        }

        var status, version: String
        var timestamp: Timestamp
        var deps: Dependencies
        var requestID: String
        /// Beyond the original's shape: which node answered, and on which engine.
        var node: String
        var engine: String

        enum CodingKeys: String, CodingKey {
            case status, version, timestamp, deps, node, engine
            case requestID = "request_id"
        }
    }

    /// The companion's readiness: each check ok, warn or fail, with what to do next.
    struct Readiness: Encodable {
        struct Check: Encodable {
            var key, label, status, detail: String
        }

        var status: String
        var score, ready, total, devices: Int
        var checks: [Check]
        var nextActions: [String]

        enum CodingKeys: String, CodingKey {
            case status, score, ready, total, devices, checks
            case nextActions = "next_actions"
        }
    }

    /// An agent as the original's definition shows it: always id, name, description (a string), version, trigger,
    /// system_prompt, llm, memory, max_turns, stream_reply, enabled; the rest when set. Plus this gateway's
    /// `running` and the schedule's zone and next fire.
    struct AgentDefinition: Encodable {
        struct Model: Encodable {
            var provider = "", model = ""
            var temperature: Double?
            var maxTokens: Int?
            var allowedProviders: [String]?

            enum CodingKeys: String, CodingKey {
                case provider, model, temperature
                case maxTokens = "max_tokens", allowedProviders = "allowed_providers"
            }
        }

        struct Memory: Encodable {
            var maxTokens: Int
            enum CodingKeys: String, CodingKey { case maxTokens = "max_tokens" }
        }

        struct Tool: Encodable {
            var name: String
        }

        struct Schedule: Encodable {
            struct Output: Encodable {
                var channel, to: String
                var botName, template: String?

                enum CodingKeys: String, CodingKey {
                    case channel, to, template
                    case botName = "bot_name"
                }
            }

            var timezone: String
            var runMissedOnStartup: Bool
            var nextRunAt: Nullable<Timestamp>
            var cron: String?
            var at: Timestamp?
            var output: Output?

            enum CodingKeys: String, CodingKey {
                case timezone, cron, at, output
                case runMissedOnStartup = "run_missed_on_startup", nextRunAt = "next_run_at"
            }
        }

        var id, name, description, version, trigger, systemPrompt: String
        var llm: Model
        var memory: Memory
        var maxTurns: Int
        var streamReply, enabled, running: Bool
        var tags, surfaces, channels: [String]?
        var tools: [Tool]?
        var schedule: Schedule?

        init(_ agent: AgentConfig, next: Date?, running: Bool) {
            var llm = Model()
            if case .llm(let settings) = agent.runner {
                llm.provider = settings.provider
                llm.model = settings.model
                llm.temperature = settings.temperature
                if settings.maxTokens > 0 { llm.maxTokens = settings.maxTokens }
                if !settings.allowedProviders.isEmpty { llm.allowedProviders = settings.allowedProviders }
            }
            self.llm = llm
            id = agent.id
            name = agent.name
            description = agent.description ?? ""
            version = agent.version
            trigger = agent.trigger == .manual ? "" : agent.trigger.rawValue
            systemPrompt = agent.systemPrompt
            memory = Memory(maxTokens: agent.memoryEntries)
            maxTurns = agent.maxTurns
            streamReply = agent.streamReply
            enabled = agent.isOn
            self.running = running
            tags = agent.tags.isEmpty ? nil : agent.tags
            surfaces = agent.surfaces.isEmpty ? nil : agent.surfaces
            channels = agent.channels.isEmpty ? nil : agent.channels
            tools = agent.toolNames.isEmpty ? nil : agent.toolNames.map(Tool.init)
            if let s = agent.schedule, s.cron != nil || s.at != nil || s.output != nil {
                schedule = Schedule(timezone: s.timeZone.identifier, runMissedOnStartup: s.runMissedOnStartup, nextRunAt: Nullable(next.map(Timestamp.init)),
                                    cron: s.cron?.expression, at: s.at.map(Timestamp.init),
                                    output: s.output.map { Schedule.Output(channel: $0.channel, to: $0.to, botName: $0.botName, template: $0.template) })
            }
        }

        enum CodingKeys: String, CodingKey {
            case id, name, description, version, trigger, llm, memory, enabled, running, tags, surfaces, channels, tools, schedule
            case systemPrompt = "system_prompt", maxTurns = "max_turns", streamReply = "stream_reply"
        }
    }

    struct AgentList: Encodable {
        struct Interface: Encodable {
            var surfaces: [String]
            var chatEligible: Bool

            enum CodingKeys: String, CodingKey {
                case surfaces
                case chatEligible = "chat_eligible"
            }
        }

        var agents: [AgentDefinition]
        var count: Int
        var interfaces: [String: Interface]
    }

    /// The original's synchronous trigger: `{result, delivered}`.
    struct Triggered: Encodable {
        var result: String
        var delivered: Bool
        var runID, sessionID: String

        enum CodingKeys: String, CodingKey {
            case result, delivered
            case runID = "run_id", sessionID = "session_id"
        }
    }

    struct Started: Encodable {
        var ok = true
        var runID, sessionID, agentID: String

        enum CodingKeys: String, CodingKey {
            case ok
            case runID = "run_id", sessionID = "session_id", agentID = "agent_id"
        }
    }

    struct RunView: Encodable {
        var id, agentID, sessionID, trigger, status: String
        var startedAt: Timestamp
        var finishedAt: Nullable<Timestamp>
        var error, deliveryID, note: Nullable<String>
        var outputs: [OutputView] = []
        var events: [EventView] = []

        init(_ run: RunRecord) {
            id = run.id
            agentID = run.agentID
            sessionID = run.sessionID
            trigger = run.trigger.rawValue
            status = run.status.rawValue
            startedAt = Timestamp(run.startedAt)
            finishedAt = Nullable(run.finishedAt.map(Timestamp.init))
            error = Nullable(run.error)
            deliveryID = Nullable(run.deliveryID)
            note = Nullable(run.note)
        }

        enum CodingKeys: String, CodingKey {
            case id, trigger, status, error, note, outputs, events
            case agentID = "agent_id", sessionID = "session_id", startedAt = "started_at", finishedAt = "finished_at", deliveryID = "delivery_id"
        }
    }

    /// Something that happened during a run (`retry`: a provider's call tried again).
    struct EventView: Encodable {
        var at: Timestamp
        var kind, detail: String
    }

    /// One output of a run on its way to a channel: pending, delivered, rejected (the service's reason) or failed.
    struct OutputView: Encodable {
        var id, channel: String
        var destination: String?
        var state: String
        var attempts: Int
        var lastReason: Nullable<String>
        var deliveredAt: Nullable<Timestamp>

        enum CodingKeys: String, CodingKey {
            case id, channel, destination, state, attempts
            case lastReason = "last_reason", deliveredAt = "delivered_at"
        }
    }
}
