import ChannelAPI
import Foundation

/// Builds the `ntfy` channel from `channels.ntfy` in the gateway config:
///
/// ```yaml
/// channels:
///   ntfy:
///     enabled: true
///     api_url: https://ntfy.example.com   # your server; https://ntfy.sh when absent
///     token: tk_…                         # optional; or SOULACY_CHANNELS_NTFY_TOKEN
///     priority: high                      # 1-5, min, low, default, high, max/urgent
///     tags: [robot]                       # a list, or "robot,house"
///     markdown: true
///     ca_file: /etc/ssl/private-ca.pem
///     timeout_seconds: 15
/// ```
///
/// Register it with `GatewayOptions.extraChannelFactories = [NtfyChannelFactory()]`; SOUL.yaml then names it:
/// `output: {channel: ntfy, to: <topic>}`.
public struct NtfyChannelFactory: ChannelFactory {
    public let kind = "ntfy"

    public init() {}

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        guard try settings.bool("enabled") == true else { return [] }
        return [NtfyChannel(configuration: try configuration(settings))]
    }

    /// The block as a configuration; every error names its key (`channels.ntfy.priority: …`).
    public func configuration(_ settings: ChannelSettings) throws(ChannelConfigError) -> NtfyConfiguration {
        var configuration = NtfyConfiguration(id: kind, serverURL: try settings.apiURL(default: "https://ntfy.sh"))
        if let token = settings.string("token") {
            // A header value: a blank or a line end inside it would break the request, not authenticate it.
            guard !token.contains(where: { $0.isWhitespace || $0.isNewline }), token.unicodeScalars.allSatisfy({ $0.isASCII }) else {
                throw ChannelConfigError(field: settings.field("token"), problem: "must be an ntfy access token (tk_…, from `ntfy token add` or Account → Access tokens)")
            }
            configuration.token = token
        }
        if let text = settings.string("priority") {
            guard let priority = NtfyPriority(text) else {
                throw ChannelConfigError(field: settings.field("priority"), problem: "must be 1 to 5, min, low, default, high, max or urgent, got '\(text)'")
            }
            configuration.priority = priority
        }
        let tags = settings.strings("tags") ?? []
        for tag in tags where tag.contains(",") || !tag.unicodeScalars.allSatisfy({ (0x21..<0x7F).contains($0.value) }) {
            throw ChannelConfigError(field: settings.field("tags"), problem: "each tag must be printable ASCII without blanks or commas (an emoji short code such as warning), got '\(tag)'")
        }
        configuration.tags = tags
        configuration.markdown = try settings.bool("markdown") ?? false
        configuration.caFile = settings.caFile
        configuration.timeout = .seconds(try settings.int("timeout_seconds", in: 1...300) ?? 15)
        return configuration
    }
}
