import ChannelAPI
import Foundation
import HTTPClient

/// One configured bot: its channel, and its poller when it carries an agent's inbound messages.
public struct TelegramBot: Sendable {
    public let channel: TelegramChannel
    /// Present for a bot with `agent_id` that is not `outbound_only`; `poller.channel == channel.name`.
    public let poller: TelegramPoller?
}

/// Builds the Telegram bots of `channels.telegram`, as Soulacy users write the block:
///
/// ```yaml
/// channels:
///   telegram:
///     enabled: true
///     token: "123456:ABC..."            # the default bot: channel id `telegram`
///     agent_id: assistant               # inbound messages go to this agent (omit for an outbound-only bot)
///     default_output_to: "424242"       # a numeric chat id
///     bots:                             # more bots: `telegram-<agent_id>` (else bot_name, else the row number)
///       - token: "654321:XYZ..."
///         agent_id: finance
///         allowed_user_ids: [424242]
/// ```
///
/// The ids follow soulacy-personal: a top-level `token` is always the bot `telegram`, and the rows of `bots:` are
/// more bots; without a top-level token the first row is `telegram`. Per bot: `token`, `agent_id`, `bot_name`,
/// `default_output_to`, `outbound_only`, `allowed_chat_ids`, `allowed_user_ids`, `ignore_groups` (default true),
/// `trigger_phrase` (default `!soulacy`). For the whole block: `api_url`, `ca_file`, `timeout_seconds` (35).
public struct TelegramChannelFactory: ChannelFactory {
    public let kind = "telegram"
    public static let defaultAPIURL = "https://api.telegram.org"
    /// The original's HTTP client timeout.
    public static let defaultTimeoutSeconds = 35

    public init() {}

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        try bots(settings).map(\.channel)
    }

    /// The pollers of the bots that take inbound messages, each naming the channel its replies go through.
    public func pollers(_ settings: ChannelSettings) throws(ChannelConfigError) -> [TelegramPoller] {
        try bots(settings).compactMap(\.poller)
    }

    public func inbound(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any InboundPoller] {
        try pollers(settings)
    }

    /// Every bot of the block; none when it is not `enabled: true` (the original considers only a real `true`).
    public func bots(_ settings: ChannelSettings) throws(ChannelConfigError) -> [TelegramBot] {
        guard try settings.bool("enabled") == true else { return [] }
        let baseURL = try settings.apiURL(default: Self.defaultAPIURL)
        let timeout = Duration.seconds(try settings.int("timeout_seconds", in: 1...600) ?? Self.defaultTimeoutSeconds)
        let http = HTTP2ClientConfiguration(caFile: settings.caFile, maximumConnectionsPerHost: HTTP2ClientConfiguration.pooledConnectionsPerHost)
        // One client for the sends of every bot (they share the host); each poller gets its own, so a held long
        // poll never stands in the way of a send.
        let sends = HTTP2Client(configuration: http)

        let rows = try Self.rows(settings)
        var bots: [TelegramBot] = []
        for (id, _, row) in rows {
            let token = try Self.token(row)
            let api = TelegramAPI(baseURL: baseURL, token: token)
            let agentID = row.string("agent_id")
            var destination: String?
            if let to = row.string("default_output_to") {
                do { _ = try TelegramChatID.parse(to) } catch { throw ChannelConfigError(field: row.field("default_output_to"), problem: error.description) }
                destination = to
            }
            let channel = TelegramChannel(name: id, agentID: agentID, botName: row.string("bot_name"), defaultDestination: destination,
                                          api: api, client: sends, requestTimeout: timeout)
            let activation = TelegramActivation(triggerPhrase: row.string("trigger_phrase") ?? TelegramActivation.defaultTriggerPhrase,
                                                ignoreGroups: try row.bool("ignore_groups") ?? true,
                                                allowedChatIDs: try Self.ids(row, "allowed_chat_ids"),
                                                allowedUserIDs: try Self.ids(row, "allowed_user_ids"))
            let outboundOnly = try row.bool("outbound_only") ?? false
            var poller: TelegramPoller?
            if let agentID, !outboundOnly {
                poller = TelegramPoller(channel: id, agentID: agentID, activation: activation, api: api,
                                        client: HTTP2Client(configuration: http), requestTimeout: timeout)
            }
            bots.append(TelegramBot(channel: channel, poller: poller))
        }
        return bots
    }

    /// The block's bots under their channel ids, as soulacy-personal names them.
    static func rows(_ settings: ChannelSettings) throws(ChannelConfigError) -> [(id: String, label: String, settings: ChannelSettings)] {
        var rows: [(id: String, label: String, settings: ChannelSettings)] = []
        let hasDefaultBot = settings.string("token") != nil
        if hasDefaultBot { rows.append(("telegram", "the top-level token", settings)) }
        for (index, block) in try settings.blocks("bots").enumerated() {
            // Errors in a row name it: channels.telegram.bots[1].token.
            let row = ChannelSettings(kind: "\(settings.kind).bots[\(index)]", values: block.values)
            var id = "telegram"
            if hasDefaultBot || index > 0 {
                let suffix = [row.string("agent_id"), row.string("bot_name")].compactMap { $0.map(Self.sanitizedID) }.first ?? String(index + 1)
                id = "telegram-\(suffix)"
            }
            if let earlier = rows.first(where: { $0.id == id }) {
                throw ChannelConfigError(field: row.field("agent_id"),
                                         problem: "gives the channel id '\(id)', which \(earlier.label) already has; give each bot its own agent_id or bot_name")
            }
            rows.append((id, "bots[\(index)]", row))
        }
        guard !rows.isEmpty else {
            throw ChannelConfigError(field: settings.field("token"), problem: "is required (or a list of bots under \(settings.field("bots")), each with its token)")
        }
        return rows
    }

    /// Each bot's `default_output_to` under its channel id (the gateway checks it as the channel checks a `to`).
    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        var defaults: [String: DefaultOutput] = [:]
        for (id, _, row) in try Self.rows(settings) {
            if let own = DefaultOutput(row) { defaults[id] = own }
        }
        return defaults
    }

    /// The original's `sanitizeID`: letters, digits, `_` and `-` stay; every other character becomes `-`.
    public static func sanitizedID(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { scalar in
            scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || scalar == "_" || scalar == "-") ? scalar : "-"
        }))
    }

    /// BotFather's token (`<bot id>:<secret>`); it goes into every URL, so nothing that would change the URL passes.
    /// Never quoted in an error.
    static func token(_ row: ChannelSettings) throws(ChannelConfigError) -> String {
        let token = try row.requiredString("token")
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-")
        guard token.unicodeScalars.allSatisfy(allowed.contains) else {
            throw ChannelConfigError(field: row.field("token"), problem: "is not a bot token as BotFather gives it (digits, ':', then letters, digits, '_' or '-')")
        }
        return token
    }

    /// An allow-list of Telegram ids (a YAML list, or one string of ids separated by commas or new lines).
    static func ids(_ row: ChannelSettings, _ key: String) throws(ChannelConfigError) -> [String] {
        let ids = row.strings(key) ?? []
        for id in ids where Int64(id) == nil {
            throw ChannelConfigError(field: row.field(key), problem: "'\(id)' is not a numeric Telegram id")
        }
        return ids.map { String(Int64($0)!) }
    }
}
