import ChannelAPI
import ChannelSupport

/// Builds the Slack channels from `channels.slack` as the Soulacy user wrote it:
///
/// ```yaml
/// channels:
///   slack:
///     enabled: true
///     bot_token: xoxb-…        # or, for several bots:
///     app_token: xapp-…        # Socket Mode, inbound only (optional here)
///     bots:
///       - {bot_token: xoxb-…, agent_id: helper}        # channel `slack`
///       - {bot_token: xoxb-…, agent_id: finance}       # channel `slack-finance`
///     api_url: https://slack.com/api                   # a proxy or a stand-in
///     ca_file: /etc/ssl/private-ca.pem
/// ```
public struct SlackChannelFactory: ChannelFactory {
    public let kind = "slack"

    public init() {}

    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        try BotRows.defaultOutputs(settings)
    }

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        guard try settings.bool("enabled") == true else { return [] }
        return try configurations(settings).map { SlackChannel(configuration: $0) }
    }

    public func configurations(_ settings: ChannelSettings) throws(ChannelConfigError) -> [SlackConfiguration] {
        _ = try settings.apiURL(default: "https://slack.com/api")
        var made: [SlackConfiguration] = []
        for (id, bot) in try BotRows.resolve(settings) {
            let token = try bot.requiredString("bot_token")
            // A bot token is xoxb-; a user token (xoxp-, xoxe.xoxp- when rotated) also posts, as in the original.
            guard token.hasPrefix("xox") else {
                throw ChannelConfigError(field: bot.field("bot_token"), problem: "must be a bot token (xoxb-…); "
                                         + (token.hasPrefix("xapp-") ? "this is an app-level token, which belongs in app_token" : "this is not a Slack token"))
            }
            let appToken = bot.string("app_token")
            if let appToken, !appToken.hasPrefix("xapp-") {
                throw ChannelConfigError(field: bot.field("app_token"), problem: "must be an app-level token (xapp-…)")
            }
            made.append(SlackConfiguration(id: id, botToken: token, appToken: appToken, apiURL: try bot.apiURL(default: "https://slack.com/api"),
                                           caFile: bot.caFile, timeout: .seconds(try bot.int("timeout_seconds", in: 1...300) ?? 10)))
        }
        return made
    }
}
