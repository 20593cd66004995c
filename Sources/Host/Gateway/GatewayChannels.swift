import ChannelAPI
import ChannelDelivery
import Discord
import Email
import Foundation
import Sidecar
import Slack
import Telegram
import Webhooks
import WhatsApp

extension Gateway {
    /// The channels this gateway builds from a Soulacy user's `channels:` block, by kind.
    public static func builtInChannelFactories(environment: [String: String] = ProcessInfo.processInfo.environment, log: Log = Log(),
                                               clock: any WallClock = SystemWallClock()) -> [any ChannelFactory] {
        [TelegramChannelFactory(), SlackChannelFactory(), DiscordChannelFactory(), WhatsAppChannelFactory(),
         WebhookChannelFactory(clock: clock), TeamsChannelFactory(), GoogleChatChannelFactory(), EmailChannelFactory(log: log),
         SidecarChannelFactory(hostEnvironment: environment, log: log, clock: clock)]
    }

    /// What the gateway config's `channels:` block built: the channels, and the pollers of those that carry messages in.
    struct BuiltChannels {
        var registry = OutboundChannelRegistry()
        var pollers: [any InboundPoller] = []
        /// Each channel's `default_output_to`, checked as the channel checks a `to`.
        var defaults: [String: DefaultOutput] = [:]
    }

    /// Every enabled block built by its kind's factory, then the embedder's own channels. A block that cannot work
    /// as written is said in the log with the key at fault and left out; the rest of the gateway serves on (as the
    /// original boots with a channel skipped). `soulacy check` reports the same problems as errors.
    static func outboundChannels(config: GatewayConfigFile, factories: [any ChannelFactory], extra: [any OutboundChannel], log: Log) -> BuiltChannels {
        var built = BuiltChannels()
        let problems = channelProblems(config: config, factories: factories, built: { built.registry.register($0) }, polling: { built.pollers.append($0) },
                                       defaults: { built.defaults = $0 })
        for problem in problems { log.error("channels: \(problem)") }
        for kind in config.disabledChannels { log.info("channels: \(kind) is in the gateway config but not enabled") }
        for channel in extra {
            built.registry.register(channel)
            if let poller = ownPoller(of: channel) { built.pollers.append(poller) }
        }
        if !built.registry.names.isEmpty { log.info("channels: \(built.registry.names.joined(separator: ", "))") }
        return built
    }

    /// The poller that reads a channel's own messages: a sidecar's come from the very process that channel
    /// supervises, so its poller cannot be built apart from it (as `ChannelFactory.inbound` builds Telegram's).
    static func ownPoller(of channel: any OutboundChannel) -> (any InboundPoller)? {
        (channel as? SidecarChannel)?.poller
    }

    /// Builds each enabled block, handing every channel built to `built` (and its pollers to `polling`); returns what
    /// went wrong, block by block.
    public static func channelProblems(config: GatewayConfigFile, factories: [any ChannelFactory], built: (any OutboundChannel) -> Void,
                                       polling: (any InboundPoller) -> Void = { _ in },
                                       defaults: ([String: DefaultOutput]) -> Void = { _ in }) -> [String] {
        let byKind = Dictionary(factories.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
        var problems: [String] = []
        var collected: [String: DefaultOutput] = [:]
        defer { defaults(collected) }
        for settings in config.channels {
            guard let factory = byKind[settings.kind] else {
                let known = byKind.keys.sorted().joined(separator: ", ")
                problems.append("channels.\(settings.kind): no such channel in this gateway (it has \(known.isEmpty ? "none built in" : known); a sidecar can add one)")
                continue
            }
            do throws(ChannelConfigError) {
                let channels = try factory.make(settings)
                // A default is checked as the channel checks a `to`, so a typo stops here, not at the first fire.
                for (name, output) in try factory.defaultOutputs(settings) {
                    guard let channel = channels.first(where: { $0.name == name }) else { continue }
                    do { try channel.validate(destination: output.to) } catch {
                        throw ChannelConfigError(field: "channels.\(settings.kind).default_output_to", problem: "\(name): \(error.description)")
                    }
                    collected[name] = output
                }
                for channel in channels {
                    built(channel)
                    if let poller = ownPoller(of: channel) { polling(poller) }
                }
                for poller in try factory.inbound(settings) { polling(poller) }
            } catch {
                problems.append(error.description)
            }
        }
        return problems
    }
}
