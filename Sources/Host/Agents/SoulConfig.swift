import Foundation

/// The agents this gateway runs, loaded from Soulacy agent files (one agent per file) or a `version: 1` bundle.
public struct SoulConfig: Sendable {
    public var agents: [AgentConfig]

    public init(agents: [AgentConfig]) { self.agents = agents }

    public func agent(id: String) -> AgentConfig? { agents.first { $0.id == id } }

    /// Agents people may see and run (the built-in System agent never leaves the gateway).
    public var visibleAgents: [AgentConfig] { agents.filter { !SoulConfigLoader.reservedAgentIDs.contains($0.id) } }
}

public struct AgentConfig: Sendable {
    public var id: String
    public var name: String
    public var description: String?
    public var runner: AgentRunnerConfig
    public var trigger: Trigger
    /// `enabled:` as the file says it (absent in a Soulacy file means false; absent in a bundle means true).
    public var enabled: Bool
    /// Set when the agent failed validation at start: it is parked although its file enables it.
    public var disabledReason: String?
    public var schedule: ScheduleConfig?
    public var location: LocationTrigger?
    public var webhook: WebhookTrigger?
    public var notifyOnFailure: FailureNotice?
    /// `run_timeout`: the whole run's wall-clock cap; nil means the runner's default.
    public var runTimeout: Duration?
    public var systemPrompt: String = ""
    /// The persona blocks rendered ahead of the system prompt.
    public var persona: Persona = Persona()
    /// `builtins`: nil when absent (all builtins whose gate passes), [] for none, or the names allowed.
    public var builtins: [String]?
    public var confirmTools: [String] = []
    public var unattended: Bool = false
    /// `memory.max_tokens`: how many of the session's last entries go to the model (an entry count, as in Soulacy).
    public var memoryEntries: Int = 0
    /// `memory.adaptive`: nil when absent.
    public var adaptiveMemory: Bool?
    /// `max_turns`: 0 means 10.
    public var maxTurns: Int = 0
    public var channels: [String] = []
    public var surfaces: [String] = []
    /// Metadata the original lists with the agent.
    public var version: String = ""
    public var tags: [String] = []
    public var streamReply: Bool = false
    /// The Python tools' names (listed, not run here).
    public var toolNames: [String] = []
    /// Fields the file sets that this gateway accepts but does not execute (Python tools, skills, MCP, …).
    public var notRunHere: [String] = []
    /// The file the agent came from.
    public var file: String = ""

    public init(id: String, name: String, description: String? = nil, runner: AgentRunnerConfig, trigger: Trigger, enabled: Bool = true,
                schedule: ScheduleConfig? = nil, location: LocationTrigger? = nil, webhook: WebhookTrigger? = nil, notifyOnFailure: FailureNotice? = nil) {
        self.id = id
        self.name = name
        self.description = description
        self.runner = runner
        self.trigger = trigger
        self.enabled = enabled
        self.schedule = schedule
        self.location = location
        self.webhook = webhook
        self.notifyOnFailure = notifyOnFailure
    }

    /// Enabled by its file and not parked by a validation error: scheduled, listed and runnable.
    public var isOn: Bool { enabled && disabledReason == nil }

    /// Where the agent shows up (Soulacy's derived surfaces): `surfaces` when given, else by trigger.
    public var effectiveSurfaces: [String] {
        if !surfaces.isEmpty { return surfaces }
        switch trigger {
        case .cron, .oneshot: return ["schedule"]
        case .channel: return channels + ["chat"]
        case .webhook: return ["webhook"]
        default: return ["chat"]
        }
    }

    /// Soulacy's default run cap when `run_timeout` is unset, zero or negative.
    public static let defaultRunTimeout: Duration = .seconds(15 * 60)

    /// The run's deadline: `run_timeout`, else a command runner's own timeout, else 15 minutes.
    public var effectiveRunTimeout: Duration {
        if let runTimeout, runTimeout > .zero { return runTimeout }
        if case .command(let command) = runner { return command.timeout }
        return Self.defaultRunTimeout
    }

    public enum Trigger: String, Sendable, CaseIterable {
        case cron
        /// `schedule.at`: fires once, ever.
        case oneshot
        /// A paired phone reports crossing a region.
        case location
        /// An HTTP POST runs it.
        case webhook
        /// Run by other agents and the API only.
        case `internal`
        /// Answers chat (`POST /api/v1/chat`).
        case channel
        /// This gateway's older name for a run-when-asked agent.
        case manual
        /// No trigger: runnable from chat and the API, scheduled only with `surfaces: [schedule]`.
        case unset = ""
    }
}

/// How an agent's run is carried out.
public enum AgentRunnerConfig: Sendable {
    /// A program: the input on stdin, the reply on stdout (this gateway's `runner:` block).
    case command(CommandRunnerConfig)
    /// A language model through a provider (every Soulacy agent without a `runner`).
    case llm(LLMSettings)
}

/// The `llm:` block.
public struct LLMSettings: Sendable, Equatable {
    /// "" means the gateway's default provider.
    public var provider: String = ""
    /// "" means the provider's configured model.
    public var model: String = ""
    public var temperature: Double?
    public var topP: Double?
    /// 0 means the provider's default.
    public var maxTokens: Int = 0
    public var baseURL: String?
    public var toolChoice: String?
    /// Empty means unrestricted, as in Soulacy's code.
    public var allowedProviders: [String] = []
    /// `output_schema` as JSON text: the final reply must parse as JSON.
    public var outputSchema: String?

    public init() {}
}

/// `identity`, `personality` and `non_negotiables`, rendered as the system message's prefix.
public struct Persona: Sendable, Equatable {
    public var role: String?
    public var expertise: [String] = []
    public var audience: String?
    public var backstory: String?
    public var tone: String?
    public var voice: String?
    public var avoid: [String] = []
    public var prefer: [String] = []
    public var must: [String] = []
    public var mustNot: [String] = []
    public var maxLength: Int?
    public var minLength: Int?
    public var format: String?

    public init() {}
}

/// `trigger: location`: a region the phones monitor.
public struct LocationTrigger: Sendable {
    public enum Event: String, Sendable { case enter, exit }
    public static let radiusRange = 100.0...5000.0

    public var name: String
    public var latitude: Double
    public var longitude: Double
    public var radiusMeters: Double
    public var on: Event
    /// Installation ids allowed to fire it; empty means any paired phone.
    public var devices: [String]
    public var cooldown: Duration
}

/// `trigger: webhook`. With a secret (this gateway's form) anything that knows it may POST /hooks/<agent-id>;
/// without one (Soulacy's form) POST /api/v1/webhooks/<agent-id> takes an API key.
public struct WebhookTrigger: Sendable {
    /// SHA-256 of the secret; the secret itself is not kept after loading.
    public var secretSHA256: [UInt8]?
    public var output: OutputConfig?
    /// Dot path to the run's text in the posted JSON.
    public var textPath: String?

    public init(secretSHA256: [UInt8]? = nil, output: OutputConfig? = nil, textPath: String? = nil) {
        self.secretSHA256 = secretSHA256
        self.output = output
        self.textPath = textPath
    }
}

public struct CommandRunnerConfig: Sendable {
    public var argv: [String]
    public var environment: [String: String]
    public var timeout: Duration
    public var workingDirectory: String?

    public init(argv: [String], environment: [String: String] = [:], timeout: Duration = .seconds(300), workingDirectory: String? = nil) {
        self.argv = argv
        self.environment = environment
        self.timeout = timeout
        self.workingDirectory = workingDirectory
    }
}

public struct ScheduleConfig: Sendable {
    /// `cron`; nil for a one-shot or an inert `schedule: {}`.
    public var cron: CronSchedule?
    /// `at`: a one-shot's instant.
    public var at: Date?
    /// The zone cron reads its fields in: `CRON_TZ=` in the expression, else `timezone:` (this gateway's extra), else the host's.
    public var timeZone: TimeZone
    /// Overrides the run's timeout for scheduled runs (this gateway's reading of `schedule.timeout`).
    public var timeout: Duration?
    public var runMissedOnStartup: Bool
    public var missedStartupWindow: Duration
    /// Where fires deliver; nil keeps the result in the run history only.
    public var output: OutputConfig?

    public init(cron: CronSchedule?, at: Date? = nil, timeZone: TimeZone, timeout: Duration? = nil, runMissedOnStartup: Bool = false,
                missedStartupWindow: Duration = .seconds(86400), output: OutputConfig?) {
        self.cron = cron
        self.at = at
        self.timeZone = cron?.timeZone ?? timeZone
        self.timeout = timeout
        self.runMissedOnStartup = runMissedOnStartup
        self.missedStartupWindow = missedStartupWindow
        self.output = output
    }
}

public struct OutputConfig: Sendable, Equatable {
    public var channel: String
    public var to: String
    /// Placeholders `{reply}`, `{agent_id}`, `{agent_name}`, `{trigger}`, `{timestamp}`; nil or empty sends the bare reply.
    public var template: String?
    /// Shown as the sender instead of the agent's name.
    public var botName: String?
}

public struct FailureNotice: Sendable {
    public static let defaultTemplate = "🚨 Soulacy agent {agent_id} failed at {timestamp}: {error}"
    public var channel: String
    public var to: String
    /// Appends the error when the template has no `{error}` (Soulacy's `include_error`).
    public var includeError: Bool
    /// Placeholders `{agent_id}`, `{agent_name}`, `{timestamp}`, `{error}`; nil means the default.
    public var template: String?
}

/// A problem in an agent file, with where it is.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Severity: String, Sendable { case error, warning }
    public let file: String
    public let line: Int
    public let column: Int
    public let message: String
    public let severity: Severity

    public init(file: String, line: Int, column: Int, message: String, severity: Severity = .error) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
        self.severity = severity
    }

    public var description: String { "\(position): \(severity == .warning ? "warning: " : "")\(message)" }
    /// `file:line:col`, as compilers print it.
    public var position: String { "\(file):\(line):\(column)" }
}

public struct ConfigErrors: Error, Sendable, CustomStringConvertible {
    public let errors: [ConfigError]
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

/// Durations as Soulacy files write them: Go's `time.ParseDuration` (`1h30m`, `500ms`, `1.5h`, `-2s`, `0`),
/// plus this gateway's older forms (`2d`, a bare number of seconds), so existing files keep loading.
public enum DurationText {
    private static let units: [(String, Double)] = [
        ("ns", 1e-9), ("us", 1e-6), ("\u{00B5}s", 1e-6), ("\u{03BC}s", 1e-6), ("ms", 1e-3), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
    ]

    /// Durations are shorter than this many seconds (about 291 years), so their nanoseconds fit an Int64.
    static let maximumSeconds: Double = 9.2e9

    public static func parse(_ text: String) -> Duration? {
        var rest = Substring(text.trimmingCharacters(in: .whitespaces))
        // A bare number of seconds within the same bound as the unit forms: every user of a duration may then count
        // it in milliseconds or nanoseconds without overflow.
        if let seconds = Int(rest) { return (0..<Int(maximumSeconds)).contains(seconds) ? .seconds(seconds) : nil }
        var sign = 1.0
        if let first = rest.first, first == "-" || first == "+" {
            sign = first == "-" ? -1 : 1
            rest = rest.dropFirst()
        }
        guard !rest.isEmpty else { return nil }
        var total = 0.0
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            guard !number.isEmpty, number != ".", number.filter({ $0 == "." }).count <= 1, let value = Double(number.hasPrefix(".") ? "0" + number : number) else { return nil }
            rest = rest.dropFirst(number.count)
            guard let unit = units.filter({ rest.hasPrefix($0.0) }).max(by: { $0.0.count < $1.0.count }) else { return nil }
            rest = rest.dropFirst(unit.0.count)
            total += value * unit.1
        }
        guard total.isFinite, abs(total) < maximumSeconds else { return nil }
        let nanoseconds = Int64((total * 1e9).rounded())
        return .nanoseconds(Int64(sign) * nanoseconds)
    }

    public static func format(_ d: Duration) -> String {
        let s = d.components.seconds
        if d.components.attoseconds != 0 || s == 0 {
            let ms = Double(s) * 1000 + Double(d.components.attoseconds) / 1e15
            if ms != 0, abs(ms) < 1000 { return "\(ms.formatted(.number.grouping(.never)))ms" }
        }
        if s % 86400 == 0, s > 0 { return "\(s / 86400)d" }
        if s % 3600 == 0, s > 0 { return "\(s / 3600)h" }
        if s % 60 == 0, s > 0 { return "\(s / 60)m" }
        return "\(s)s"
    }
}
