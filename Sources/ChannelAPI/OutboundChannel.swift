import Foundation

/// One output on its way to one destination of a channel, as the framework hands it to each attempt. It was
/// recorded with the run's end; the framework retries it until the channel says `delivered`, `rejected` or
/// `failed`, and never sends one that was recorded as delivered again.
public struct ChannelSend: Sendable, Equatable, Codable {
    /// Stable across attempts (the delivery id): a receiver that sees it twice knows it is a retry
    /// (Standard Webhooks' `webhook-id`, an email's Message-ID).
    public var id: String
    /// The configured channel id the output names: `telegram`, `telegram-finance`, `webhook`.
    public var channel: String
    /// SOUL.yaml's `to` (or the channel's `default_output_to`): a chat id, an address, a named endpoint.
    public var destination: String
    public var output: Output
    /// 1 for the first attempt.
    public var attempt: Int
    public var createdAt: Date

    public init(id: String, channel: String, destination: String, output: Output, attempt: Int = 1, createdAt: Date) {
        self.id = id
        self.channel = channel
        self.destination = destination
        self.output = output
        self.attempt = attempt
        self.createdAt = createdAt
    }
}

/// What one attempt came to. Expected remote results are values, not thrown errors.
public enum ChannelSendOutcome: Sendable, Equatable {
    /// The service took it; `remoteID` is its id for the message when it gives one (a Telegram message id).
    case delivered(remoteID: String?)
    /// A passing trouble (429, 5xx, a timeout, no connection): try again, never sooner than `after` when the
    /// service said so (`Retry-After`, Telegram's `retry_after`).
    case retry(after: Duration?, reason: String)
    /// The service refused it for good (a bad token, an unknown chat, 410 Gone): no more attempts. `reason`
    /// carries the service's own words, shown on the run.
    case rejected(reason: String)
    /// It cannot be sent as it is (it cannot be encoded, nothing to send): no more attempts.
    case failed(reason: String)
}

/// A channel the framework delivers to durably. A channel implements only what is its own: checking a
/// destination when the agent files load, and one attempt to send. The framework records every output with the
/// run that made it, claims it with a lease, retries with exponential backoff and jitter (`Retry-After` wins),
/// keeps its final state and shows it on the run, and survives a kill at any point.
public protocol OutboundChannel: Sendable {
    /// The configured id SOUL.yaml names in `schedule.output.channel` (`telegram`, `telegram-finance`).
    var name: String { get }
    /// Checks `to` at load, so a typo is an error with a line number, not a lost result.
    func validate(destination: String) throws(DestinationError)
    /// One attempt: send `send.output` to `send.destination`, and say how it went.
    func attempt(_ send: ChannelSend) async -> ChannelSendOutcome
    /// One attempt with the framework's store of disabled endpoints, which outlives the process: what the gateway
    /// calls. A channel that disables endpoints (a webhook's 410 Gone) keeps them there; the default ignores it.
    func attempt(_ send: ChannelSend, endpoints: any EndpointStateStore) async -> ChannelSendOutcome
}

extension OutboundChannel {
    public func attempt(_ send: ChannelSend, endpoints: any EndpointStateStore) async -> ChannelSendOutcome { await attempt(send) }
}

/// Builds a kind of channel from its block of the gateway config (`channels.<kind>` in the Soulacy user's
/// `~/.soulacy/config.yaml`, with `SOULACY_CHANNELS_<KIND>_<KEY>` overrides applied). A kind with several bots
/// (`telegram` with `bots:`) builds one channel per bot, under the original's ids.
public protocol ChannelFactory: Sendable {
    /// The key under `channels:` this factory reads (`telegram`, `google_chat`).
    var kind: String { get }
    func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel]
    /// The block's inbound pollers, one per bot that carries an agent's messages (none by default).
    func inbound(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any InboundPoller]
    /// Each channel's `default_output_to`, by the channel id `make` gives it. By default the block's own, under
    /// its kind; a kind with several bots says which bot each row's default belongs to.
    func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput]
}

extension ChannelFactory {
    public func inbound(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any InboundPoller] { [] }

    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        DefaultOutput(settings).map { [settings.kind: $0] } ?? [:]
    }
}

/// A channel's configured default destination: `default_output_to`, with `default_output_template` and
/// `bot_name`, as Soulacy users put them on a channel's block or on one of its bots. An output that names the
/// channel without a `to` goes there; a scheduled result with no usable target goes to the only channel that has
/// one (SOULACY-AGENTS.md §6).
public struct DefaultOutput: Sendable, Equatable {
    /// Empty when the default is the channel's own configured target (a Teams block whose URL is its default).
    public var to: String
    public var template: String?
    public var botName: String?

    public init(to: String, template: String? = nil, botName: String? = nil) {
        self.to = to
        self.template = template
        self.botName = botName
    }

    /// The default of a block or bot row; nil without a non-empty `default_output_to`.
    public init?(_ settings: ChannelSettings) {
        guard let to = settings.string("default_output_to") else { return nil }
        self.init(to: to, template: settings.string("default_output_template"), botName: settings.string("bot_name"))
    }
}

/// A value of a channel's config block, as YAML gave it.
public indirect enum ChannelSetting: Sendable, Equatable {
    case string(String)
    case bool(Bool)
    case number(Double)
    case list([ChannelSetting])
    case map([String: ChannelSetting])
    case null

    /// A scalar as text (numbers without a fraction as integers), nil for lists, maps and null.
    public var text: String? {
        switch self {
        case .string(let s): s
        case .bool(let b): b ? "true" : "false"
        case .number(let n): n.rounded() == n && abs(n) < 9e15 ? String(Int64(n)) : String(n)
        default: nil
        }
    }
}

/// One channel's config block. Every accessor names the key in its error (`channels.telegram.token`).
public struct ChannelSettings: Sendable, Equatable {
    /// The key under `channels:` (`telegram`).
    public let kind: String
    public let values: [String: ChannelSetting]

    public init(kind: String, values: [String: ChannelSetting]) {
        self.kind = kind
        self.values = values
    }

    /// `channels.<kind>.<key>`, as errors name it.
    public func field(_ key: String) -> String { "channels.\(kind).\(key)" }

    /// A non-empty scalar, trimmed (a YAML number or bool reads as its text); nil when absent, null or empty.
    public func string(_ key: String) -> String? {
        guard let text = values[key]?.text?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else { return nil }
        return text
    }

    public func requiredString(_ key: String) throws(ChannelConfigError) -> String {
        guard let value = string(key) else { throw ChannelConfigError(field: field(key), problem: "is required") }
        return value
    }

    /// `true`/`false`, and the original's yes/no/on/off/1/0 for strings; nil when absent.
    public func bool(_ key: String) throws(ChannelConfigError) -> Bool? {
        switch values[key] {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        case .number(let n)?: return n != 0
        case .string(let s)?:
            switch s.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "yes", "on", "1": return true
            case "false", "no", "off", "0", "": return false
            default: throw ChannelConfigError(field: field(key), problem: "must be true or false, got '\(s)'")
            }
        default: throw ChannelConfigError(field: field(key), problem: "must be true or false")
        }
    }

    /// A whole number (a numeric string counts, as in the original); nil when absent.
    public func int(_ key: String, in range: ClosedRange<Int>) throws(ChannelConfigError) -> Int? {
        guard let text = string(key) else { return nil }
        guard let n = Int(text), range.contains(n) else {
            throw ChannelConfigError(field: field(key), problem: "must be a whole number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
        }
        return n
    }

    /// A list of strings; a single string is split at commas and newlines (the original's allow-lists).
    public func strings(_ key: String) -> [String]? {
        switch values[key] {
        case .list(let items)?: return items.compactMap { $0.text?.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        case .string(let s)?: return s.split(whereSeparator: { $0 == "," || $0 == "\n" || $0 == "\t" }).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        case nil, .null?: return nil
        case let other?: return other.text.map { [$0] }
        }
    }

    /// Each map of a list (`bots:`), as settings of the same kind.
    public func blocks(_ key: String) throws(ChannelConfigError) -> [ChannelSettings] {
        switch values[key] {
        case nil, .null?: return []
        case .list(let items)?:
            var blocks: [ChannelSettings] = []
            for (index, item) in items.enumerated() {
                guard case .map(let fields) = item else { throw ChannelConfigError(field: "\(field(key))[\(index)]", problem: "must be a mapping") }
                blocks.append(ChannelSettings(kind: kind, values: fields))
            }
            return blocks
        default: throw ChannelConfigError(field: field(key), problem: "must be a list")
        }
    }

    /// A map of strings (a webhook's `headers`).
    public func stringMap(_ key: String) -> [String: String]? {
        guard case .map(let fields)? = values[key] else { return nil }
        return fields.compactMapValues(\.text)
    }

    /// `api_url`: the service's base URL (a proxy or a local stand-in), else `defaultURL`; never with a trailing slash.
    public func apiURL(default defaultURL: String) throws(ChannelConfigError) -> String {
        let url = string("api_url") ?? defaultURL
        guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
            throw ChannelConfigError(field: field("api_url"), problem: "must be an http:// or https:// URL, got '\(url)'")
        }
        return url.hasSuffix("/") ? String(url.dropLast()) : url
    }

    /// `ca_file`: a PEM bundle to trust for this service instead of the system's (a private CA, a stand-in).
    public var caFile: String? { string("ca_file") }
}

/// A channel block that cannot work as written, naming the key: `channels.telegram.token: is required`.
public struct ChannelConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let field: String
    public let problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}

/// Inbound messages for agents with `trigger: channel` that a channel fetches itself, with no public address
/// (Telegram's getUpdates, an IMAP mailbox). The framework keeps the cursor durably: it records each message's
/// run and the new cursor in one transaction, so a restart neither loses nor repeats a message.
public protocol InboundPoller: Sendable {
    /// The channel id replies go back through (`telegram`).
    var channel: String { get }
    /// The agent the messages are for (the bot's `agent_id`).
    var agentID: String { get }
    /// Waits up to `timeout` for messages after `cursor` (nil: from where the service starts); returns them with
    /// the cursor that confirms them. Throws only for trouble worth a log line; the framework waits and asks again.
    func poll(after cursor: String?, timeout: Duration) async throws -> InboundBatch
}

public struct InboundBatch: Sendable, Equatable {
    public var messages: [InboundMessage]
    /// The cursor to pass next time; storing it confirms `messages`.
    public var cursor: String?

    public init(messages: [InboundMessage], cursor: String?) {
        self.messages = messages
        self.cursor = cursor
    }
}

/// One message a person sent to a channel, for its agent.
public struct InboundMessage: Sendable, Equatable {
    /// The service's id for the message (unique within the channel).
    public var id: String
    /// Where a reply goes: the chat id, the sender's address. The session is `<channel>-<replyTo>`.
    public var replyTo: String
    public var senderID: String
    public var senderName: String?
    public var text: String
    /// A private chat rather than a group (groups need the trigger phrase in the original).
    public var isDirect: Bool

    public init(id: String, replyTo: String, senderID: String, senderName: String? = nil, text: String, isDirect: Bool) {
        self.id = id
        self.replyTo = replyTo
        self.senderID = senderID
        self.senderName = senderName
        self.text = text
        self.isDirect = isDirect
    }
}

/// A channel with something of its own to keep running (a sidecar process, a connection): the gateway starts it
/// with its services and stops it on shutdown, after the last sends.
public protocol SupervisedChannel: OutboundChannel {
    func start() async
    func stop() async
}
