/// What started a run, in the names runs are stored and shown with: an open set (a struct with static members, as
/// APNSwift's push types), so a trigger a newer agent file brings breaks no caller.
public struct RunTrigger: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    /// Started by a call (`/agents/:id/run`, `/agents/:id/trigger`).
    public static let api = RunTrigger(rawValue: "api")
    public static let chat = RunTrigger(rawValue: "chat")
    public static let cron = RunTrigger(rawValue: "cron")
    /// A cron fire missed while the gateway was down, run at start.
    public static let cronMissed = RunTrigger(rawValue: "cron-missed")
    public static let oneshot = RunTrigger(rawValue: "oneshot")
    public static let webhook = RunTrigger(rawValue: "webhook")
    public static let location = RunTrigger(rawValue: "location")
    /// A message to the agent's bot on a chat channel (Telegram, email), answered in that chat.
    public static let channel = RunTrigger(rawValue: "channel")
    /// Started by another agent.
    public static let agent = RunTrigger(rawValue: "agent")

    /// Runs nobody watches as they happen (cron, webhook, location, agent-to-agent).
    public var isBackground: Bool { [.cron, .cronMissed, .webhook, .location, .agent].contains(self) }
    /// Runs the schedule started: they act for nobody in particular.
    public var isScheduled: Bool { [.cron, .cronMissed, .oneshot].contains(self) }

    /// Soulacy's name for it, as templates and a model's `__trigger:…__` show it.
    public var soulacyName: String {
        switch self {
        case .cronMissed: "cron_missed_startup"
        case .api: "manual"
        default: rawValue
        }
    }

    public var description: String { rawValue }
}
