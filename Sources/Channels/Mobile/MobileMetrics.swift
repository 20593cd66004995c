import ChannelAPI
import Metrics

/// The phones' metrics: wake-ups handed to each transport, each attempt by outcome and by the service's status,
/// how long the service took, and how long a line waited between being stored and a phone fetching it.
public struct MobileMetrics: Sendable {
    let queued: Counter
    let attempts: Counter
    let responses: Counter
    let sendDuration: Histogram
    /// From a line being stored to a phone fetching it: every engine's fetch log records it.
    public let fetchDelay: Histogram

    public init(_ registry: MetricsRegistry) {
        queued = registry.counter("soulacy_wakeups_queued_total", "Wake-ups handed to a transport for the first time, by transport.", labels: ["transport"])
        attempts = registry.counter("soulacy_push_attempts_total", "Wake-up attempts by transport and outcome (sent, retry, rejected: the token was refused and cleared, error).",
                                    labels: ["transport", "outcome"])
        responses = registry.counter("soulacy_push_responses_total", "Push services' answers by transport and HTTP status (none: no answer came).",
                                     labels: ["transport", "status"])
        sendDuration = registry.histogram("soulacy_push_send_duration_seconds", "How long one wake-up attempt took, by transport.", labels: ["transport"])
        fetchDelay = registry.histogram("soulacy_delivery_fetch_delay_seconds", "From a line being stored to a phone fetching it (first fetch per phone).",
                                        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400])
    }

    func attempted(_ attempt: WakeAttempt, transport: String, first: Bool) {
        if first { queued.increment(transport) }
        let outcome = switch attempt.outcome {
        case .delivered: "sent"
        case .retry: "retry"
        case .tokenRejected: "rejected"
        case .failed: "error"
        }
        attempts.increment(transport, outcome)
        // Status codes are few (the services' documented ones), so the label stays bounded.
        responses.increment(transport, attempt.status.map { String($0) } ?? "none")
        sendDuration.observe(attempt.latency, transport)
    }
}
