import ChannelAPI
import Foundation

/// A chat channel served by a sidecar (External Channel Protocol v1). `to` is the platform's chat id, passed to
/// the sidecar as `send.to` verbatim. The host starts it (`start()`), takes its `message` frames through `poller`
/// for the agent its `agent_id` names (each a run in the session `<name>-<chat_id>`, answered in that chat), and
/// stops it (`stop()`) on shutdown.
///
/// Delivery: a sidecar that declares the `ack` capability gets at-least-once delivery (a send counts when it
/// answers `ack`; `nack` and silence are retried by the framework with the same `send.id`, so a sidecar may see
/// an id twice and can drop the second). One that does not is treated as the original treats it: the send
/// counts once its frame is written to the sidecar's stdin. While the sidecar is down, a send is a retry after
/// the time until its next start; the framework keeps it durably (the original dropped it).
public struct SidecarChannel: SupervisedChannel {
    public let supervisor: SidecarSupervisor

    public init(config: SidecarConfig, timing: SidecarTiming = SidecarTiming(), hostEnvironment: [String: String] = ProcessInfo.processInfo.environment,
                log: Log = Log(), clock: any WallClock = SystemWallClock(), random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        supervisor = SidecarSupervisor(config: config, timing: timing, log: log, clock: clock, hostEnvironment: hostEnvironment, random: random)
    }

    public var name: String { supervisor.config.name }

    /// Messages people sent through the sidecar, for `trigger: channel` agents (session `<name>-<replyTo>`); empty
    /// without an `agent_id`. It has one reader: `poller`'s, when the framework runs it.
    public var inbound: InboundMessageStream { supervisor.inbound }

    /// The framework's reader of `inbound`, for the agent of `agent_id`; nil for a sidecar that only delivers.
    public var poller: SidecarInboundPoller? {
        supervisor.config.agentID.map { SidecarInboundPoller(channel: name, agentID: $0, stream: supervisor.inbound) }
    }

    public func start() async { await supervisor.start() }
    public func stop() async { await supervisor.stop() }
    public var status: SidecarStatus { get async { await supervisor.status } }

    /// Any chat id the platform uses: not empty, one line.
    public func validate(destination: String) throws(DestinationError) {
        guard !destination.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .invalid("channel \(name): 'to' must be the platform's chat id, not empty")
        }
        guard !destination.contains(where: \.isNewline) else { throw .invalid("channel \(name): 'to' must be one line") }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let text = send.output.body
        guard !text.isEmpty else { return .failed(reason: "nothing to send: the output has no text") }
        guard !send.destination.isEmpty else { return .failed(reason: "no destination: 'to' is empty") }
        return await supervisor.send(to: send.destination, text: text, id: send.id)
    }
}
