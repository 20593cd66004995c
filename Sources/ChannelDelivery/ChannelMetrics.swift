import Metrics

/// The channel hand-off's metrics: each attempt by channel and outcome, and how long the channel took.
public struct ChannelMetrics: Sendable {
    let sends: Counter
    let duration: Histogram

    public init(_ registry: MetricsRegistry) {
        sends = registry.counter("soulacy_channel_sends_total", "Channel send attempts by channel and outcome (delivered, retry, rejected, failed).",
                                 labels: ["channel", "outcome"])
        duration = registry.histogram("soulacy_channel_send_duration_seconds", "How long one channel send attempt took, by channel.", labels: ["channel"])
    }
}
