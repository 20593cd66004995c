import APIKit
import ChannelAPI
import ChannelDelivery
import Lifecycle

/// What an embedder adds to the gateway in one piece: kinds of channel built from the gateway config's
/// `channels:` block, the long-running work they need (a bot's socket connection, a poller of its own), and the
/// routes they answer (a service's callback), all started, stopped and served with the gateway's own.
///
/// ```swift
/// struct NtfyPlugin: GatewayPlugin {
///     var channelFactories: [any ChannelFactory] { [NtfyChannelFactory()] }
/// }
/// options.plugins = [NtfyPlugin()]
/// ```
public protocol GatewayPlugin: Sendable {
    /// Kinds of channel, each built from its `channels.<kind>` block; messages people send in come through each
    /// factory's `inbound` pollers, which the gateway runs and carries into runs durably.
    var channelFactories: [any ChannelFactory] { get }
    /// Services started once the channels are built, before the channel dispatcher, and stopped after it (so a
    /// send in flight still finds its connection).
    func services(_ context: GatewayPluginContext) -> [ServiceGroup.Entry]
    /// Routes served beside the API's own, through the same authentication, limits and error shape.
    func routes(_ context: GatewayPluginContext) -> [Route]
}

extension GatewayPlugin {
    public var channelFactories: [any ChannelFactory] { [] }
    public func services(_ context: GatewayPluginContext) -> [ServiceGroup.Entry] { [] }
    public func routes(_ context: GatewayPluginContext) -> [Route] { [] }
}

/// What a plugin's services and routes may use of the running gateway.
public struct GatewayPluginContext: Sendable {
    /// Every channel the gateway delivers to durably, the plugin's own among them.
    public let outbound: OutboundChannelRegistry
    public let clock: any WallClock
    public let log: Log
}
