import Agents
import APIKit
import ChannelDelivery
import Foundation
import Identity
import JSON
import Mobile

/// The console's agents and health pages (docs/console-api.md): what each agent does next and did last, the files
/// that did not load, and how every path out of the gateway stands. Read-only; a viewer sees only their own runs.
extension GatewayAPI {
    var consoleRoutes: [Route] {
        [
            Route(.GET, "/api/v1/console/agents", role: .viewer, summary: "Agents with their trigger, next fires, your last runs and the files' problems", handler: consoleAgents),
            Route(.GET, "/api/v1/console/health", role: .viewer, summary: "Push services, channels, outboxes and the relay carriage at a glance", handler: consoleHealth),
        ]
    }

    struct ConsoleAgents: Encodable {
        struct Agent: Encodable {
            var id, name: String
            var enabled: Bool
            var disabledReason: String?
            var running: Bool
            var trigger: Trigger
            var nextFires: [Timestamp]
            var lastRuns: [Run]

            enum CodingKeys: String, CodingKey {
                case id, name, enabled, running, trigger
                case disabledReason = "disabled_reason", nextFires = "next_fires", lastRuns = "last_runs"
            }
        }
        struct Trigger: Encodable {
            var kind: String
            var schedule: String?
            var timezone: String?
            var at: Timestamp?
        }
        struct Run: Encodable {
            var id, status, trigger: String
            var startedAt: Timestamp
            var finishedAt: Timestamp?
            var durationMs: Int?
            var error: String?
            var note: String?
            var outputs: [OutputView]

            enum CodingKeys: String, CodingKey {
                case id, status, trigger, error, note, outputs
                case startedAt = "started_at", finishedAt = "finished_at", durationMs = "duration_ms"
            }
        }
        struct Problem: Encodable {
            var file: String
            var line, column: Int
            var severity, message: String
        }
        var agents: [Agent]
        var problems: [Problem]
    }

    /// How many of a person's runs each agent shows, and how many fires ahead.
    static let consoleRunsShown = 5
    static let consoleFiresShown = 3

    @Sendable func consoleAgents(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let now = clock.now()
        var agents: [ConsoleAgents.Agent] = []
        for agent in catalog.current.visibleAgents {
            var runs: [ConsoleAgents.Run] = []
            for run in try await runStore.recentRuns(agentID: agent.id, subject: caller.subject, limit: Self.consoleRunsShown) {
                runs.append(ConsoleAgents.Run(id: run.id, status: run.status.rawValue, trigger: run.trigger.rawValue, startedAt: Timestamp(run.startedAt),
                                              finishedAt: run.finishedAt.map(Timestamp.init),
                                              durationMs: run.finishedAt.map { Int(($0.timeIntervalSince(run.startedAt) * 1000).rounded()) },
                                              error: run.error, note: run.note, outputs: try await outputs(of: run)))
            }
            let schedule = agent.schedule
            agents.append(ConsoleAgents.Agent(
                id: agent.id, name: agent.name, enabled: agent.isOn, disabledReason: agent.disabledReason, running: await self.runs.isRunning(agent.id),
                trigger: ConsoleAgents.Trigger(kind: agent.trigger.rawValue, schedule: schedule?.cron?.expression,
                                               timezone: schedule.map { $0.timeZone.identifier }, at: schedule?.at.map(Timestamp.init)),
                nextFires: await scheduler.nextFires(of: agent.id, count: Self.consoleFiresShown, after: now).map(Timestamp.init),
                lastRuns: try runs))
        }
        // Paths relative to the agents' folder: where the file is, without telling a viewer the host's layout.
        let root = catalog.path.hasSuffix("/") ? catalog.path : catalog.path + "/"
        let problems = catalog.problems.map { problem in
            ConsoleAgents.Problem(file: problem.file.hasPrefix(root) ? String(problem.file.dropFirst(root.count)) : (problem.file as NSString).lastPathComponent,
                                  line: problem.line, column: problem.column, severity: problem.severity.rawValue, message: problem.message)
        }
        return .json(ConsoleAgents(agents: agents, problems: problems))
    }

    struct ConsoleHealth: Encodable {
        struct Path: Encodable {
            var name: String
            var configured: Bool
            var lastOutcome: String?
            var lastReason: String?
            var lastAt: Timestamp?
            /// A channel's endpoints its service said are gone (a webhook's 410): no send goes there until the
            /// endpoint's entry in the gateway config changes. Only on channels that disable endpoints.
            var disabledEndpoints: [DisabledEndpointView]?

            enum CodingKeys: String, CodingKey {
                case name, configured
                case lastOutcome = "last_outcome", lastReason = "last_reason", lastAt = "last_at", disabledEndpoints = "disabled_endpoints"
            }
        }
        struct DisabledEndpointView: Encodable {
            /// How the config names it (`alerts`, `channels.webhook.url`); never its URL or secret.
            var endpoint: String
            var reason: String
            var since: Timestamp
        }
        struct Outbox: Encodable {
            var pending: Int
            var oldestPendingAgeSeconds: Nullable<Int>

            enum CodingKeys: String, CodingKey {
                case pending
                case oldestPendingAgeSeconds = "oldest_pending_age_seconds"
            }
        }
        struct Relay: Encodable {
            var state: String
            var url: String
            var phones: Int
            var lastRoundAt: Timestamp?
            var lastFailureAt: Timestamp?
            var lastFailure: String?

            enum CodingKeys: String, CodingKey {
                case state, url, phones
                case lastRoundAt = "last_round_at", lastFailureAt = "last_failure_at", lastFailure = "last_failure"
            }
        }
        var status: String
        var version: String
        var database: String
        var push: [Path]
        var channels: [Path]
        var outbox: Outbox
        var channelOutbox: Outbox
        var relay: Nullable<Relay>

        enum CodingKeys: String, CodingKey {
            case status, version, database, push, channels, outbox, relay
            case channelOutbox = "channel_outbox"
        }
    }

    /// Every path the gateway knows, configured or not, so the page says what is missing as well as what failed.
    static let knownTransports = ["apns", "fcm", "relay", "webpush"]

    @Sendable func consoleHealth(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let now = clock.now()
        func age(_ date: Date?) -> Int? { date.map { max(0, Int(now.timeIntervalSince($0))) } }
        let transports = Array(Set(transportNames + Self.knownTransports)).sorted()
        let push = try await mobile.outbox.health(transports: transportNames)
        let pushPaths = transports.map { name in
            ConsoleHealth.Path(name: name, configured: transportNames.contains(name), lastOutcome: push.lastOutcomes[name]?.state,
                               lastReason: push.lastOutcomes[name]?.outcome, lastAt: push.lastOutcomes[name].map { Timestamp($0.at) })
        }
        let channelNames = runs.outbound.names
        let channels = try await runs.channelOutbox?.health(channels: channelNames)
        let disabled = try await disabledEndpoints()
        // The mobile channel is always there: the inbox is the sink every phone reads.
        var channelPaths = [ConsoleHealth.Path(name: "mobile", configured: true)]
        channelPaths += channelNames.filter { $0 != "mobile" }.map { name in
            ConsoleHealth.Path(name: name, configured: true, lastOutcome: channels?.lastOutcomes[name]?.state,
                               lastReason: channels?.lastOutcomes[name]?.reason, lastAt: channels?.lastOutcomes[name].map { Timestamp($0.at) },
                               disabledEndpoints: disabled[name]?.map { ConsoleHealth.DisabledEndpointView(endpoint: $0.display, reason: $0.reason, since: Timestamp($0.since)) })
        }
        var database = "ok"
        do { try await mobile.transactions.checkReadable() } catch { database = "failing: \(error)" }
        let relay = await relayStatus().map { status in
            // A good round clears the failure, so a failure on record is the latest word. A node of several standing by
            // while another carries the relay traffic says so.
            let state = status.lastFailure != nil ? "failing" : (status.lastRoundAt == nil ? "starting" : (status.carrying ? "connected" : "standby"))
            return ConsoleHealth.Relay(state: state, url: status.url, phones: status.phones, lastRoundAt: status.lastRoundAt.map(Timestamp.init),
                                       lastFailureAt: status.lastFailureAt.map(Timestamp.init), lastFailure: status.lastFailure)
        }
        return .json(ConsoleHealth(status: database == "ok" ? "ok" : "degraded", version: GatewayVersion.current, database: database,
                                   push: pushPaths, channels: channelPaths,
                                   outbox: .init(pending: push.pending, oldestPendingAgeSeconds: Nullable(age(push.oldestPendingAt))),
                                   channelOutbox: .init(pending: channels?.pending ?? 0, oldestPendingAgeSeconds: Nullable(age(channels?.oldestPendingAt))),
                                   relay: Nullable(relay)))
    }
}
