import Foundation

/// A loaded SOUL.yaml: the agents this gateway runs.
public struct SoulConfig: Sendable {
    public var agents: [AgentConfig]

    public func agent(id: String) -> AgentConfig? { agents.first { $0.id == id } }
}

public struct AgentConfig: Sendable {
    public var id: String
    public var name: String
    public var description: String?
    public var runner: CommandRunnerConfig
    public var trigger: Trigger
    public var schedule: ScheduleConfig?
    public var location: LocationTrigger?
    public var webhook: WebhookTrigger?
    public var notifyOnFailure: FailureNotice?

    public enum Trigger: String, Sendable {
        case cron
        /// Runs only when asked (API, chat, another agent).
        case manual
        /// A paired phone reports crossing a region.
        case location
        /// An HTTP POST with the agent's secret.
        case webhook
    }
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

/// `trigger: webhook`: POST /hooks/<agent-id> with the secret runs the agent with the body as input.
public struct WebhookTrigger: Sendable {
    /// SHA-256 of the secret; the secret itself is not kept after loading.
    public var secretSHA256: [UInt8]
    public var output: OutputConfig?
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
    public var cron: CronSchedule
    public var timeZone: TimeZone
    /// Overrides the runner's timeout for scheduled runs.
    public var timeout: Duration?
    public var runMissedOnStartup: Bool
    public var missedStartupWindow: Duration
    public var output: OutputConfig
}

public struct OutputConfig: Sendable {
    public var channel: String
    public var to: String
    /// `{reply}` is replaced by the agent's reply.
    public var template: String?
    /// Shown as the sender instead of the agent's name.
    public var botName: String?
}

public struct FailureNotice: Sendable {
    public var channel: String
    public var to: String
    /// Puts the runner's error text in the notice; off by default, errors can hold secrets.
    public var includeError: Bool
}

/// A problem in a config file, with where it is.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let file: String
    public let line: Int
    public let column: Int
    public let message: String
    public var description: String { "\(file):\(line):\(column): \(message)" }
}

public struct ConfigErrors: Error, Sendable, CustomStringConvertible {
    public let errors: [ConfigError]
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

/// Parses "30s", "5m", "1h30m", "2d" or a bare number of seconds.
public enum DurationText {
    public static func parse(_ text: String) -> Duration? {
        let t = text.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(t), seconds >= 0 { return .seconds(seconds) }
        var total: Int64 = 0
        var number = ""
        var sawUnit = false
        for ch in t {
            if ch.isASCII, ch.isNumber { number.append(ch); continue }
            guard let n = Int64(number) else { return nil }
            let unit: Int64
            switch ch {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86400
            default: return nil
            }
            total += n * unit
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit else { return nil }
        return .seconds(total)
    }

    public static func format(_ d: Duration) -> String {
        let s = d.components.seconds
        if s % 86400 == 0, s > 0 { return "\(s / 86400)d" }
        if s % 3600 == 0, s > 0 { return "\(s / 3600)h" }
        if s % 60 == 0, s > 0 { return "\(s / 60)m" }
        return "\(s)s"
    }
}
