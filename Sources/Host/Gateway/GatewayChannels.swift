import ChannelAPI
import ChannelDelivery
import Webhooks

extension Gateway {
    /// The channels this gateway builds from a Soulacy user's `channels:` block, by kind.
    public static let builtInChannelFactories: [any ChannelFactory] = [
        WebhookChannelFactory(), TeamsChannelFactory(), GoogleChatChannelFactory(),
    ]

    /// Every enabled block built by its kind's factory, then the embedder's own channels. A block that cannot work
    /// as written is said in the log with the key at fault and left out; the rest of the gateway serves on (as the
    /// original boots with a channel skipped). `soulacy check` reports the same problems as errors.
    static func outboundChannels(config: GatewayConfigFile, factories: [any ChannelFactory], extra: [any OutboundChannel], log: Log) -> OutboundChannelRegistry {
        var registry = OutboundChannelRegistry()
        for problem in channelProblems(config: config, factories: factories, built: { registry.register($0) }) {
            log.error("channels: \(problem)")
        }
        for kind in config.disabledChannels { log.info("channels: \(kind) is in the gateway config but not enabled") }
        for channel in extra { registry.register(channel) }
        if !registry.names.isEmpty { log.info("channels: \(registry.names.joined(separator: ", "))") }
        return registry
    }

    /// Builds each enabled block, handing every channel built to `built`; returns what went wrong, block by block.
    public static func channelProblems(config: GatewayConfigFile, factories: [any ChannelFactory], built: (any OutboundChannel) -> Void) -> [String] {
        let byKind = Dictionary(factories.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
        var problems: [String] = []
        for settings in config.channels {
            guard let factory = byKind[settings.kind] else {
                let known = byKind.keys.sorted().joined(separator: ", ")
                problems.append("channels.\(settings.kind): no such channel in this gateway (it has \(known.isEmpty ? "none built in" : known); a sidecar can add one)")
                continue
            }
            do {
                for channel in try factory.make(settings) { built(channel) }
            } catch {
                problems.append(error.description)
            }
        }
        return problems
    }
}
