import Storage
import ChannelAPI
import ChannelDelivery
import Crypto
import Foundation
import Metrics
import Identity
import JSON
import LLM
import SQLite
import Synchronization

public enum RunStartError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownAgent(String)
    case alreadyRunning(agentID: String, runID: String)
    /// As many conversations are running as the gateway (or this person) may have at once: try again shortly.
    case busy(limit: Int, perPerson: Bool)
    /// `enabled: false`, or parked by a validation error.
    case disabled(agentID: String, reason: String?)
    /// This scheduled fire was run already (by another gateway on the same database).
    case alreadyFired(agentID: String, at: Date)

    public var description: String {
        switch self {
        case .unknownAgent(let id): return "no agent '\(id)' in SOUL.yaml"
        case let .disabled(id, reason): return "agent '\(id)' is disabled" + (reason.map { ": \($0)" } ?? " (enabled: false in its file)")
        case let .alreadyRunning(agentID, runID): return "agent '\(agentID)' is already running (run \(runID)); its runs never overlap"
        case let .busy(limit, perPerson):
            return perPerson ? "\(limit) conversations of yours are running; try again when one has finished"
                             : "\(limit) conversations are running on this gateway; try again when one has finished"
        case let .alreadyFired(agentID, at): return "agent '\(agentID)': the fire of \(at.formatted(.iso8601)) was run already"
        }
    }
}

/// Where a run's reply goes.
public struct RunDestination: Sendable, Equatable {
    public var channel: String
    public var to: String
    public var template: String?
    public var botName: String?
    /// Added to the delivery's metadata (location.event, location.name, …).
    public var metadata: [String: String]
    /// Set when the reply goes to the only channel with a default because its own target did not resolve: the
    /// message says so in front, and the run records why.
    public var fallbackFrom: OutputProblem?

    public init(_ output: OutputConfig, metadata: [String: String] = [:]) {
        self.init(channel: output.channel, to: output.to, template: output.template, botName: output.botName, metadata: metadata)
    }

    public init(channel: String, to: String, template: String? = nil, botName: String? = nil, metadata: [String: String] = [:]) {
        self.channel = channel
        self.to = to
        self.template = template
        self.botName = botName
        self.metadata = metadata
    }
}

/// Credentials that live as long as a run: the command calls the gateway (approvals, mobile.invoke) as its run,
/// with the run's subject and operator rights, and the credential dies with the run.
public final class RunCredentials: Sendable {
    public static let prefix = "srun_"
    private let active = Mutex<[String: Principal]>([:])

    public init() {}

    func issue(runID: String, subject: String) -> String {
        let token = Self.prefix + Base64URL.encode(SecureBytes.random(count: 32))
        active.withLock { $0[token] = Principal(keyID: "run:\(runID)", subject: subject, role: .operator) }
        return token
    }

    func revoke(_ token: String) { active.withLock { _ = $0.removeValue(forKey: token) } }

    public func principal(for token: String) -> Principal? {
        guard token.hasPrefix(Self.prefix) else { return nil }
        return active.withLock { $0[token] }
    }
}

/// What a chat run brings besides its text: the conversation so far, the session it continues, voice mode, and a
/// listener for the streamed reply.
public struct ChatContext: Sendable {
    /// The run's id when the caller needs it before the run starts (a stream announces it first).
    public var runID: String?
    public var sessionID: String
    public var history: [ChatMessage] = []
    /// `response_mode: voice`: the reply also comes as a short spoken version.
    public var voice = false
    public var onText: (@Sendable (String) -> Void)?
    public var onToolConfirm: (@Sendable (String, ToolCall) -> Void)?

    public init(sessionID: String, history: [ChatMessage] = [], voice: Bool = false, onText: (@Sendable (String) -> Void)? = nil,
                onToolConfirm: (@Sendable (String, ToolCall) -> Void)? = nil) {
        self.sessionID = sessionID
        self.history = history
        self.voice = voice
        self.onText = onText
        self.onToolConfirm = onToolConfirm
    }
}

public struct StartedRun: Sendable, Equatable {
    public let runID: String
    public let sessionID: String
    public let agentID: String
}

/// Starts agent runs, keeps one run per agent at a time, and hands each reply to its channel.
public actor AgentRuns {
    public typealias RunnerFactory = @Sendable (AgentConfig) -> any AgentRunner

    public nonisolated let catalog: AgentCatalog
    let channels: ChannelRegistry
    public nonisolated let store: any RunStore
    let makeRunner: RunnerFactory
    let clock: any WallClock
    let log: Log
    public nonisolated let credentials: RunCredentials
    /// Told about runs' progress so they can appear as Live Activities.
    public nonisolated let progress: (any RunProgressObserver)?
    /// Where a failed location run tells the phone whose crossing started it.
    nonisolated let alerts: (any DeviceAlerts)?
    /// Channels reached through the durable hand-off (telegram, slack, webhook, …): an output to one is recorded with
    /// the run's end and sent by the channel dispatcher, which `sendsRecorded` wakes.
    public nonisolated let outbound: OutboundChannelRegistry
    public nonisolated let channelOutbox: (any ChannelOutbox)?
    /// Where each run's reply goes (the agent's output, the channels' defaults, the original's fallback).
    public nonisolated let router: OutputRouter
    nonisolated let sendsRecorded: @Sendable () -> Void
    public nonisolated let metrics: AgentMetrics?
    private var activityRuns: [String: ActivityRun] = [:]
    /// Chat streams listening for their run's approvals (`tool_confirm`), by run id.
    private var confirmListeners: [String: @Sendable (String, ToolCall) -> Void] = [:]
    private var running: [String: (runID: String, task: Task<RunRecord, Never>)] = [:]
    /// Agents whose start is being recorded (agent id → run id): running already, as far as a second start goes.
    private var starting: [String: String] = [:]
    /// Chat runs: a conversation may go on while the agent's scheduled run does (they never block each other).
    private var chatRuns: [String: Task<RunRecord, Never>] = [:]
    /// Conversations running or being recorded, by person and in all: any key, and anyone who may message a
    /// channel's bot, starts one per message, each a process or a model call, so they are bounded.
    private var chatsByPerson: [String: Int] = [:]
    private var chatsTotal = 0
    private var chatSubjects: [String: String] = [:]
    /// At most this many conversations at once on this gateway, and per person; a start past either is `.busy`.
    public nonisolated let maximumChats: Int
    public nonisolated let maximumChatsPerPerson: Int
    /// Runs that just finished, so a caller that starts and then waits never misses a fast run.
    private var recent: [String: RunRecord] = [:]
    private var recentOrder: [String] = []

    public init(catalog: AgentCatalog, channels: ChannelRegistry, store: any RunStore, clock: any WallClock, log: Log,
                credentials: RunCredentials = RunCredentials(), progress: (any RunProgressObserver)? = nil, alerts: (any DeviceAlerts)? = nil,
                outbound: OutboundChannelRegistry = OutboundChannelRegistry(), channelOutbox: (any ChannelOutbox)? = nil,
                defaultOutputs: [String: DefaultOutput] = [:],
                sendsRecorded: @escaping @Sendable () -> Void = {}, metrics: AgentMetrics? = nil,
                maximumChats: Int = 64, maximumChatsPerPerson: Int = 8, makeRunner: @escaping RunnerFactory) {
        self.metrics = metrics
        self.maximumChats = maximumChats
        self.maximumChatsPerPerson = maximumChatsPerPerson
        router = OutputRouter(defaults: defaultOutputs, isRegistered: { [channels, outbound] name in channels.has(name) || outbound.has(name) })
        self.credentials = credentials
        self.alerts = alerts
        self.outbound = outbound
        self.channelOutbox = channelOutbox
        self.sendsRecorded = sendsRecorded
        self.progress = progress
        self.catalog = catalog
        self.channels = channels
        self.store = store
        self.clock = clock
        self.log = log
        self.makeRunner = makeRunner
    }

    public func isRunning(_ agentID: String) -> Bool { running[agentID] != nil }

    public static func newRunID() -> String { "run_" + Hex.encode(SecureBytes.random(count: 10)) }

    /// The run in flight for a session, as a Live Activity sees it.
    public func activityRun(sessionID: String) -> ActivityRun? { activityRuns[sessionID] }

    public func activityRun(runID: String) -> ActivityRun? { activityRuns.values.first { $0.runID == runID } }

    /// Starts a run in the background; refuses when the agent is already running.
    @discardableResult
    public func start(agentID: String, input: String, trigger: RunTrigger, output: RunOutput, timeout: Duration? = nil,
                      subject: String = "owner", chat: ChatContext? = nil, sessionID namedSession: String? = nil, runID namedRun: String? = nil,
                      answer: ((StartedRun) -> CommitHook.Answer)? = nil,
                      finishAnswer: (@Sendable (RunRecord) -> CommitHook.Answer)? = nil,
                      fire: ScheduledFire? = nil) async throws(RunStartError) -> StartedRun {
        guard let agent = catalog.agent(id: agentID) else { throw .unknownAgent(agentID) }
        guard agent.isOn else { throw .disabled(agentID: agentID, reason: agent.disabledReason) }
        if chat == nil, let current = running[agentID]?.runID ?? starting[agentID] { throw .alreadyRunning(agentID: agentID, runID: current) }
        if chat != nil {
            // Reserved before the first suspension, so starts interleaving on the actor cannot all pass.
            guard chatsTotal < maximumChats else { throw .busy(limit: maximumChats, perPerson: false) }
            guard chatsByPerson[subject, default: 0] < maximumChatsPerPerson else { throw .busy(limit: maximumChatsPerPerson, perPerson: true) }
            chatsTotal += 1
            chatsByPerson[subject, default: 0] += 1
        }
        let runID = chat?.runID ?? namedRun ?? AgentRuns.newRunID()
        let sessionID = chat?.sessionID ?? namedSession ?? "ses_" + Hex.encode(SecureBytes.random(count: 10))
        var record = RunRecord(id: runID, agentID: agentID, sessionID: sessionID, trigger: trigger, status: .running, startedAt: clock.now())
        record.subject = subject
        var request = RunRequest(agentID: agentID, runID: runID, sessionID: sessionID, input: input, trigger: trigger,
                                 timeout: timeout ?? agent.effectiveRunTimeout)
        request.subject = subject
        if let chat {
            request.history = chat.history
            request.voice = chat.voice
            request.onText = chat.onText
            request.onToolConfirm = chat.onToolConfirm
            confirmListeners[runID] = chat.onToolConfirm
        }
        let credential = credentials.issue(runID: runID, subject: subject)
        request.environment["SOULACY_RUN_TOKEN"] = credential
        let activity = ActivityRun(runID: runID, sessionID: sessionID, agentID: agentID, agentName: agent.name, subject: subject,
                                   background: trigger.isBackground, startedAt: record.startedAt)
        activityRuns[sessionID] = activity
        let started = StartedRun(runID: runID, sessionID: sessionID, agentID: agentID)
        let route = router.route(output, agent: agent)
        // Recorded before the run's task starts, so a caller's answer (the 202 naming this run) commits with it.
        if let answer { CommitHook.current?.answerWithNextEffect(answer(started)) }
        // The start is recorded before the run goes; meanwhile the agent counts as running here (the actor may take
        // other calls while the store answers), so two starts of one agent never both pass.
        if chat == nil { starting[agentID] = runID }
        let begun: Bool
        do { begun = try await store.begin(record, fire: fire) } catch {
            log.error("run \(record.id): could not record its start: \(error)")
            begun = true
        }
        if chat == nil { starting[agentID] = nil }
        if !begun {
            if chat != nil { releaseChat(subject: subject) }
            activityRuns[sessionID] = nil
            credentials.revoke(credential)
            throw .alreadyFired(agentID: agentID, at: fire?.at ?? record.startedAt)
        }
        let credentials = self.credentials
        let progress = self.progress
        // The run's lines name the run, not the request that started it (a run outlives its 202 by hours).
        let task = Task {
            await Log.$taskMetadata.withValue(["run_id": runID]) {
                await progress?.runStarted(activity)
                let finished = await self.execute(agent: agent, record: record, request: request, route: route, finishAnswer: finishAnswer)
                credentials.revoke(credential)
                await progress?.finished(sessionID: sessionID, succeeded: finished.status == .succeeded)
                return finished
            }
        }
        // Registered before the run's task can begin (it runs on this actor, and nothing here suspends since).
        if chat == nil {
            running[agentID] = (runID, task)
        } else {
            chatRuns[runID] = task
            chatSubjects[runID] = subject
        }
        return started
    }

    /// An approval asked through the API for a run in flight (a command agent's `POST /api/v1/approvals`): a chat
    /// stream following that run shows it as `tool_confirm`, as it shows an LLM agent's gated tool.
    public func approvalAsked(runID: String, callID: String, tool: String, arguments: JSONValue) {
        confirmListeners[runID]?(callID, ToolCall(id: callID, name: tool, arguments: arguments))
    }

    /// Stops a run of `subject`'s, named by its run id or its session id (`/chat/cancel`); the id of the run stopped.
    public func cancel(_ id: String, subject: String) -> String? {
        guard let run = activityRuns[id] ?? activityRuns.values.first(where: { $0.runID == id }), run.subject == subject else { return nil }
        if let task = chatRuns[run.runID] {
            task.cancel()
        } else if let entry = running.values.first(where: { $0.runID == run.runID }) {
            entry.task.cancel()
        } else {
            return nil
        }
        return run.runID
    }

    /// Waits for a run started here; nil when it is not (or no longer) running.
    public func wait(runID: String) async -> RunRecord? {
        if let done = recent[runID] { return done }
        if let chat = chatRuns[runID] { return await chat.value }
        guard let entry = running.values.first(where: { $0.runID == runID }) else { return nil }
        return await entry.task.value
    }

    /// Waits for every run in flight (used on shutdown and in tests).
    public func waitForAll() async {
        for entry in running.values { _ = await entry.task.value }
        for task in chatRuns.values { _ = await task.value }
    }

    private func releaseChat(subject: String) {
        chatsTotal -= 1
        chatsByPerson[subject, default: 1] -= 1
        if chatsByPerson[subject] == 0 { chatsByPerson[subject] = nil }
    }

    private func finished(_ record: RunRecord) {
        if running[record.agentID]?.runID == record.id { running[record.agentID] = nil }
        chatRuns[record.id] = nil
        if let subject = chatSubjects.removeValue(forKey: record.id) { releaseChat(subject: subject) }
        confirmListeners[record.id] = nil
        activityRuns[record.sessionID] = nil
        recent[record.id] = record
        recentOrder.append(record.id)
        if recentOrder.count > 256 { recent[recentOrder.removeFirst()] = nil }
    }

    private func execute(agent: AgentConfig, record: RunRecord, request: RunRequest, route: OutputRoute,
                         finishAnswer: (@Sendable (RunRecord) -> CommitHook.Answer)?) async -> RunRecord {
        var record = record
        var sends: [PendingChannelSend] = []
        var destination: RunDestination?
        if case .deliver(let resolved) = route { destination = resolved }
        defer { finished(record) }
        log.info("run \(record.id) of agent \(agent.id) started (\(request.trigger))")
        do {
            let result = try await makeRunner(agent).run(request)
            record.status = .succeeded
            let reply = result.reply.trimmingCharacters(in: .whitespacesAndNewlines)
            record.reply = reply
            record.spokenReply = result.spoken ?? (request.voice ? VoiceReply.shorten(reply) : nil)
            if !reply.isEmpty, let problem = destination?.fallbackFrom {
                record.note = "delivered_via_fallback: \(problem)"
            }
            if reply.isEmpty {
                log.info("run \(record.id) finished with no output; nothing to deliver")
            } else if case .undelivered(let problem) = route {
                // The result stays in the history; the run says why it went nowhere.
                record.note = problem.description
                log.warning("run \(record.id) of agent \(agent.id): delivered nowhere: \(problem.code): \(problem)")
            } else if let destination, outbound.has(destination.channel), channelOutbox != nil {
                // Recorded with the run's end below; the channel dispatcher sends it from there.
                let send = PendingChannelSend(channel: destination.channel, destination: destination.to,
                                              output: output(reply: reply, agent: agent, record: record, destination: destination), subject: record.subject)
                sends.append(send)
                record.deliveryID = send.id
            } else if let destination {
                record.deliveryID = try await deliver(reply: reply, agent: agent, record: record, destination: destination)
            }
        } catch let error as RunError {
            record.status = .failed
            record.error = error.description
            log.warning("run \(record.id) of agent \(agent.id) failed: \(error.logDescription)")
            // A run someone stopped on purpose is not a failure anyone needs to be told about.
            if error != .cancelled {
                await notifyFailure(agent: agent, record: record, error: error)
                await alertFiringDevice(agent: agent, record: record, destination: destination)
            }
        } catch {
            // The reply existed but no channel took it: the run failed to deliver.
            record.status = .failed
            record.error = "delivery failed: \(error)"
            log.error("run \(record.id) of agent \(agent.id): \(record.error!)")
        }
        record.finishedAt = clock.now()
        do {
            // A caller waiting for the reply (chat, trigger, webhook) has its answer recorded with the run's end.
            try await store.finish(id: record.id, status: record.status, error: record.error, deliveryID: record.deliveryID, note: record.note,
                                   at: record.finishedAt!, answer: finishAnswer?(record), sends: sends)
            if !sends.isEmpty { sendsRecorded() }
            if let metrics {
                if record.deliveryID?.hasPrefix("dlv_") == true { metrics.outputsStored.increment("mobile") }
                for send in sends { metrics.outputsStored.increment(send.channel) }
            }
        } catch {
            log.error("run \(record.id): could not record its end: \(error)")
        }
        metrics?.runs.increment(record.status.rawValue)
        metrics?.runDuration.observe(record.finishedAt!.timeIntervalSince(record.startedAt), record.status.rawValue)
        return record
    }

    /// `{reply}`, `{agent_id}`, `{agent_name}`, `{trigger}`, `{timestamp}` (delivery time, UTC, RFC 3339); no template sends the reply.
    func render(_ template: String?, reply: String, agent: AgentConfig, trigger: RunTrigger) -> String {
        guard let template, !template.isEmpty else { return reply }
        // The reply goes in last, so placeholders written inside it stay as they are.
        return template
            .replacingOccurrences(of: "{agent_id}", with: agent.id)
            .replacingOccurrences(of: "{agent_name}", with: agent.name)
            .replacingOccurrences(of: "{trigger}", with: trigger.soulacyName)
            .replacingOccurrences(of: "{timestamp}", with: clock.now().formatted(.iso8601))
            .replacingOccurrences(of: "{reply}", with: reply)
    }

    /// The output a run's reply becomes for its destination: the template applied, the run's facts as metadata.
    private func output(reply: String, agent: AgentConfig, record: RunRecord, destination: RunDestination) -> Output {
        var text = render(destination.template, reply: reply, agent: agent, trigger: record.trigger)
        if destination.fallbackFrom != nil {
            text = "⚠ The result of \(agent.id) had no delivery target, so it came to the default channel.\n\n" + text
        }
        let name = destination.botName ?? agent.name
        var metadata = destination.metadata
        metadata["trigger"] = record.trigger.rawValue
        metadata["run_id"] = record.id
        return Output(agentID: agent.id, agentName: name, sessionID: record.sessionID, parts: [text], metadata: metadata)
    }

    private func deliver(reply: String, agent: AgentConfig, record: RunRecord, destination: RunDestination) async throws -> String {
        let output = output(reply: reply, agent: agent, record: record, destination: destination)
        let receipt = try await channels.channel(named: destination.channel).deliver(output, to: destination.to)
        log.info("run \(record.id) delivered as \(receipt.deliveryID) to \(destination.channel) \(destination.to) (\(receipt.recipientCount) devices)")
        return receipt.deliveryID
    }

    /// The original app's contract (§5.1, §11): a run a region crossing started that fails sends the firing device,
    /// and only it, a `SOULACY_TRIGGER` alert at priority 10. The body stays generic: an error's text can carry a
    /// provider's message or a command's output, and nothing of a run travels in a push.
    private func alertFiringDevice(agent: AgentConfig, record: RunRecord, destination: RunDestination?) async {
        guard record.trigger == .location, let alerts, let to = destination?.to, case .device(let device)? = try? Destination(parsing: to) else { return }
        let signal = WakeSignal(category: .trigger, title: "\(agent.name) could not run", body: "The run did not finish. Open Soulacy to see why.",
                                deepLink: "soulacy://activity", threadID: "trigger-\(agent.id)", priority: .high)
        do { try await alerts.alert(signal, deviceID: device) } catch {
            log.error("run \(record.id): the failed-run alert could not be queued: \(error)")
        }
    }

    /// Soulacy's failure notice: the template (default `🚨 Soulacy agent {agent_id} failed at {timestamp}: {error}`), and with
    /// `include_error` the error appended when the template does not show it.
    private func notifyFailure(agent: AgentConfig, record: RunRecord, error: RunError) async {
        guard let notice = agent.notifyOnFailure else { return }
        let template = notice.template ?? FailureNotice.defaultTemplate
        var text = template
            .replacingOccurrences(of: "{agent_id}", with: agent.id)
            .replacingOccurrences(of: "{agent_name}", with: agent.name)
            .replacingOccurrences(of: "{timestamp}", with: clock.now().formatted(.iso8601))
            .replacingOccurrences(of: "{error}", with: error.description)
        if notice.includeError, !template.contains("{error}") { text += "\n\n\(error.description)" }
        let output = Output(agentID: agent.id, agentName: agent.name, sessionID: record.sessionID, title: "\(agent.name) failed",
                            parts: [text], metadata: ["trigger": record.trigger.rawValue, "run_id": record.id, "failure": "true"])
        if outbound.has(notice.channel), let channelOutbox {
            do {
                try await channelOutbox.enqueue([PendingChannelSend(channel: notice.channel, destination: notice.to, output: output, subject: record.subject)],
                                         runID: record.id, now: clock.now())
                sendsRecorded()
            } catch {
                log.error("run \(record.id): the failure notice could not be recorded: \(error)")
            }
            return
        }
        guard channels.has(notice.channel) else {
            log.warning("run \(record.id): the failure notice was not sent: no channel '\(notice.channel)' registered")
            return
        }
        do {
            _ = try await channels.channel(named: notice.channel).deliver(output, to: notice.to)
        } catch {
            log.error("run \(record.id): the failure notice could not be delivered: \(error)")
        }
    }
}
