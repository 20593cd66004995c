import ChannelAPI

/// A sidecar's inbound side for the framework: the `message` frames its supervisor took, handed over in batches
/// for the agent the sidecar's `agent_id` names. A sidecar pushes and cannot be asked again, so there is no cursor:
/// the framework keeps each message once by the channel and the frame's `id` (`channel_inbound`), and a sidecar
/// that sends an id again (after its own restart or the gateway's) starts no second run.
///
/// The one reader of its channel's stream: build it through `SidecarChannel.poller`, once per channel.
public struct SidecarInboundPoller: InboundPoller {
    public let channel: String
    public let agentID: String
    let stream: InboundMessageStream
    /// The most messages one batch carries (one transaction takes them).
    public static let batchLimit = 64

    init(channel: String, agentID: String, stream: InboundMessageStream) {
        self.channel = channel
        self.agentID = agentID
        self.stream = stream
    }

    /// Waits up to `timeout` for a message, then takes what else is already buffered; `cursor` is not used.
    public func poll(after cursor: String?, timeout: Duration) async throws -> InboundBatch {
        if stream.isDrained {
            // The channel stopped: nothing will come, and asking at once again would spin.
            try await Task.sleep(for: timeout)
            return InboundBatch(messages: [], cursor: nil)
        }
        guard let first = await stream.next(within: timeout) else { return InboundBatch(messages: [], cursor: nil) }
        var messages = [first]
        while messages.count < Self.batchLimit, let more = stream.nextBuffered() { messages.append(more) }
        return InboundBatch(messages: messages, cursor: nil)
    }
}
