import ChannelAPI
import ChannelSupport

/// Builds the Discord channels from `channels.discord` as the Soulacy user wrote it:
///
/// ```yaml
/// channels:
///   discord:
///     enabled: true
///     token: "Bot MTA…"        # with or without the "Bot " prefix; or, for several bots:
///     bots:
///       - {token: MTA…, agent_id: helper}        # channel `discord`
///       - {token: MTE…, agent_id: finance}       # channel `discord-finance`
///     api_url: https://discord.com/api/v10       # a proxy or a stand-in, with the API version
///     ca_file: /etc/ssl/private-ca.pem
/// ```
/// `app_id` and `guild_id` belong to the gateway connection (inbound) and are not read here.
public struct DiscordChannelFactory: ChannelFactory {
    public let kind = "discord"

    public init() {}

    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        try BotRows.defaultOutputs(settings)
    }

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        guard try settings.bool("enabled") == true else { return [] }
        return try configurations(settings).map { DiscordChannel(configuration: $0) }
    }

    public func configurations(_ settings: ChannelSettings) throws(ChannelConfigError) -> [DiscordConfiguration] {
        _ = try settings.apiURL(default: "https://discord.com/api/v10")
        var made: [DiscordConfiguration] = []
        for (id, bot) in try BotRows.resolve(settings) {
            let token = Self.bareToken(try bot.requiredString("token"))
            guard !token.isEmpty else { throw ChannelConfigError(field: bot.field("token"), problem: "is required (only the 'Bot ' prefix is there)") }
            guard !token.contains(where: { $0.isWhitespace }) else {
                throw ChannelConfigError(field: bot.field("token"), problem: "must be the bot token from the Developer Portal (Bot → Reset Token), optionally after 'Bot '")
            }
            made.append(DiscordConfiguration(id: id, token: token, apiURL: try bot.apiURL(default: "https://discord.com/api/v10"),
                                             caFile: bot.caFile, timeout: .seconds(try bot.int("timeout_seconds", in: 1...300) ?? 15)))
        }
        return made
    }

    /// soulacy-personal's normalisation: the token is sent as `Bot <token>` whether or not the config has the prefix.
    static func bareToken(_ configured: String) -> String {
        let trimmed = configured.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "bot" { return "" }
        guard trimmed.lowercased().hasPrefix("bot ") else { return trimmed }
        return String(trimmed.dropFirst(4)).trimmingCharacters(in: .whitespaces)
    }
}
