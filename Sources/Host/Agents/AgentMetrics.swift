import Metrics

/// The agents' metrics: schedule fires by outcome, runs by outcome and their duration, outputs stored by channel.
/// Labels are bounded by design: outcomes are fixed words, channels are the configured ones.
public struct AgentMetrics: Sendable {
    let fires: Counter
    let runs: Counter
    let runDuration: Histogram
    let outputsStored: Counter

    public init(_ registry: MetricsRegistry) {
        fires = registry.counter("soulacy_cron_fires_total", "Schedule fires by outcome: ran, skipped_running (the previous run was still going), replayed (missed while down, run at start), missed (not replayed).", labels: ["outcome"])
        for outcome in ["ran", "skipped_running", "replayed", "missed"] { fires.add([outcome], 0) }
        runs = registry.counter("soulacy_runs_total", "Agent runs ended, by outcome.", labels: ["outcome"])
        runDuration = registry.histogram("soulacy_run_duration_seconds", "How long agent runs took, by outcome.", labels: ["outcome"],
                                         buckets: [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900])
        // Every outcome from zero, so the first run already shows as an increase (a rate needs two samples).
        for outcome in ["succeeded", "failed", "interrupted"] {
            runs.add([outcome], 0)
            runDuration.touch([outcome])
        }
        outputsStored = registry.counter("soulacy_deliveries_stored_total", "Run outputs committed with the run's end, by channel (the mobile inbox, or a channel's durable hand-off).", labels: ["channel"])
    }

    public enum FireOutcome: String, Sendable {
        case ran, skippedRunning = "skipped_running", replayed, missed
    }

    func fired(_ outcome: FireOutcome, count: Int = 1) { fires.add([outcome.rawValue], Double(count)) }
}
