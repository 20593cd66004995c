import Synchronization
import APIKit
import ChannelAPI
import ChannelDelivery
import Crypto
import Foundation
import HTTPServer
import Metrics
import Mobile
import RelayCarriage
import Sidecar
import SQLite

/// Every metric the gateway exports, registered in one place (the one file to open to add one): the families that
/// parts record into (agents, channels, the database) and the gauges read when Prometheus scrapes. README lists them.
struct GatewayMetrics: Sendable {
    let registry: MetricsRegistry
    let agents: AgentMetrics
    let channels: ChannelMetrics
    let database: DatabaseMetrics
    let mobile: MobileMetrics

    init(_ registry: MetricsRegistry) {
        self.registry = registry
        agents = AgentMetrics(registry)
        channels = ChannelMetrics(registry)
        database = DatabaseMetrics(registry)
        mobile = MobileMetrics(registry)
        registry.gauge("soulacy_build_info", "The running build: always 1, its version as a label.", labels: ["version"]) {
            [([GatewayVersion.current], 1)]
        }
        ProcessMetrics.register(in: registry)
    }

    /// The gauges that read the gateway's state at scrape time: outbox depth and age, sidecars, credentials.
    func registerState(pushOutbox: any PushOutbox, channelOutbox: any ChannelOutbox, outbound: OutboundChannelRegistry, transports: WakeTransportRegistry,
                       tlsCertificatePEM: String?, clock: any WallClock) {
        // Read before each scrape (async: the outbox may be on another machine), shown by the gauges below.
        let snapshot = Mutex<(push: PushOutboxHealth?, channels: ChannelOutboxHealth?)>((nil, nil))
        registry.beforeScrape {
            let push = try? await pushOutbox.health(transports: [])
            let channels = try? await channelOutbox.health(channels: [])
            snapshot.withLock { $0 = (push, channels) }
        }
        let pushHealth = { @Sendable in snapshot.withLock { $0.push } }
        let channelHealth = { @Sendable in snapshot.withLock { $0.channels } }
        registry.gauge("soulacy_outbox_pending", "Rows waiting in a durable outbox, by lane (push: wake-ups; channels: channel sends).", labels: ["lane"]) {
            [(["push"], Double(pushHealth()?.pending ?? 0)), (["channels"], Double(channelHealth()?.pending ?? 0))]
        }
        registry.gauge("soulacy_outbox_oldest_pending_age_seconds", "Age of the oldest row still waiting in a durable outbox (0 when none), by lane.", labels: ["lane"]) {
            let now = clock.now()
            func age(_ date: Date?) -> Double { date.map { max(0, now.timeIntervalSince($0)) } ?? 0 }
            return [(["push"], age(pushHealth()?.oldestPendingAt)), (["channels"], age(channelHealth()?.oldestPendingAt))]
        }
        let sidecars = outbound.all.compactMap { $0 as? SidecarChannel }
        if !sidecars.isEmpty {
            registry.gauge("soulacy_sidecar_up", "Whether a sidecar process is running with its handshake done (1) or not (0).", labels: ["sidecar"]) {
                sidecars.map { ([$0.name], $0.supervisor.currentStatus.protocolVersion != nil ? 1 : 0) }
            }
            registry.gauge("soulacy_sidecar_connected", "Whether a sidecar reports its platform connected (1) or not (0).", labels: ["sidecar"]) {
                sidecars.map { ([$0.name], $0.supervisor.currentStatus.connected ? 1 : 0) }
            }
            registry.counter("soulacy_sidecar_restarts_total", "Times the supervisor restarted a sidecar since the gateway started.", labels: ["sidecar"]) {
                sidecars.map { ([$0.name], Double($0.supervisor.currentStatus.totalRestarts)) }
            }
        }
        // The transports' own credentials (an APNs provider token's signing time, an FCM access token's expiry).
        let credentialed = transports.transports.compactMap { $0 as? any ReportsCredentialTimes }
        @Sendable func times(_ event: CredentialTime.Event) -> [([String], Double)] {
            credentialed.flatMap(\.credentialTimes).filter { $0.event == event }.map { ([$0.credential], $0.at.timeIntervalSince1970) }
        }
        registry.gauge("soulacy_credential_issued_timestamp_seconds", "When a push credential in use was made, as a Unix timestamp (APNs wants its provider token under an hour old).",
                       labels: ["credential"]) { times(.issued) }
        registry.gauge("soulacy_credential_expiry_timestamp_seconds", "When a push credential in use expires, as a Unix timestamp.",
                       labels: ["credential"]) { times(.expires) }
        if let pem = tlsCertificatePEM, let expiry = try? SelfSignedCertificate.expiry(pem: pem) {
            registry.gauge("soulacy_tls_certificate_expiry_timestamp_seconds", "When the gateway's TLS certificate expires, as a Unix timestamp.") {
                [([], expiry.timeIntervalSince1970)]
            }
        }
    }

    /// The relay carriage's lag: how long since a round with the mailbox last went through (it polls twice a second).
    func registerRelay(_ carriage: RelayCarriage, started: Date, clock: any WallClock) {
        registry.gauge("soulacy_relay_carriage_lag_seconds", "Seconds since the relay carriage last completed a round with the mailbox (since start when it never has).") {
            [([], max(0, clock.now().timeIntervalSince(carriage.lastSuccessfulRound ?? started)))]
        }
    }

    /// `GET /metrics`: the text format Prometheus scrapes.
    static func response(_ registry: MetricsRegistry) async -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"), ("Cache-Control", "no-store")],
                     body: Array(await registry.scrape().utf8))
    }
}

/// The database pool's waits and how long the writer is held, as histograms.
struct DatabaseMetrics: DatabaseMetricsSink {
    let waits: Histogram
    let held: Histogram

    init(_ registry: MetricsRegistry) {
        waits = registry.histogram("soulacy_database_pool_wait_seconds", "Time callers waited for a busy database connection, by connection (writer, reader).",
                                   labels: ["connection"], buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5])
        held = registry.histogram("soulacy_database_write_duration_seconds", "How long each write access (a transaction and its commit) held the writer.",
                                  buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5])
    }

    func waited(_ duration: Duration, for connection: DatabaseConnectionRole) { waits.observe(duration, connection.rawValue) }
    func heldWriter(_ duration: Duration) { held.observe(duration) }
}
