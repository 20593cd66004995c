import ChannelAPI

/// `channels.email`: one outbound channel `email`, and with `agent_id` and `imap_host` an IMAP poller for that agent.
public struct EmailChannelFactory: ChannelFactory {
    public let kind = "email"
    private let log: Log

    public init(log: Log = Log()) {
        self.log = log
    }

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        let configuration = try EmailConfiguration(settings)
        return [EmailChannel(name: settings.kind, configuration: configuration.smtp)]
    }

    /// The inbound side (not in the original): the mailbox poller, when `agent_id` and `imap_host` are set.
    public func inbound(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any InboundPoller] { try makePollers(settings) }

    public func makePollers(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any InboundPoller] {
        let configuration = try EmailConfiguration(settings)
        guard let imap = configuration.imap else { return [] }
        return [IMAPPoller(channel: settings.kind, configuration: imap, ownAddress: configuration.smtp.from.address, log: log)]
    }
}
