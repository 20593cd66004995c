import ChannelAPI
import Foundation
import Outbox

/// Channels by configured id, built at start from the gateway config and the embedder's own.
public struct OutboundChannelRegistry: Sendable {
    private var channels: [String: any OutboundChannel] = [:]

    public init(_ channels: [any OutboundChannel] = []) {
        for channel in channels { self.channels[channel.name] = channel }
    }

    public mutating func register(_ channel: any OutboundChannel) { channels[channel.name] = channel }
    public var names: [String] { channels.keys.sorted() }
    /// Every channel, in the order of their names.
    public var all: [any OutboundChannel] { names.compactMap { channels[$0] } }
    public func channel(named name: String) -> (any OutboundChannel)? { channels[name] }
    public func has(_ name: String) -> Bool { channels[name] != nil }
}

/// One attempt at a channel send, and its outcome recorded on the row: the channel's lane of the outbox.
public final class ChannelLane: OutboxLane {
    public let name = "channels"
    public let outbox: any ChannelOutbox
    public let channels: OutboundChannelRegistry
    let clock: any WallClock
    let policy: RetryPolicy
    let log: Log
    /// Handed to every attempt: the endpoints channels disabled, kept in the outbox's database.
    public let endpoints: any EndpointStateStore
    let metrics: ChannelMetrics?

    /// `endpoints`: the disabled endpoints, kept by the same engine as the outbox (the composition root picks both).
    public init(outbox: any ChannelOutbox, channels: OutboundChannelRegistry, clock: any WallClock, policy: RetryPolicy, log: Log,
                endpoints: any EndpointStateStore, metrics: ChannelMetrics? = nil) {
        self.metrics = metrics
        self.outbox = outbox
        self.channels = channels
        self.clock = clock
        self.policy = policy
        self.log = log
        self.endpoints = endpoints
    }

    public func releaseAbandonedLeases(ownOwner owner: String) async throws -> Int { try await outbox.releaseAbandonedLeases(ownOwner: owner) }

    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [ChannelOutboxEntry] {
        try await outbox.claimDue(owner: owner, now: now, lease: lease, limit: limit)
    }

    public func nextDue() async throws -> Date? { try await outbox.nextDue() }

    public func attempt(_ entry: ChannelOutboxEntry, owner: String) async {
        do {
            let now = clock.now()
            guard now < entry.expiresAt else {
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .failed, reason: "gave up after 24 hours: \(entry.lastReason ?? "never sent")", remoteID: nil, at: now)
                return
            }
            guard let channel = channels.channel(named: entry.channel) else {
                // The gateway config lost this channel since: wait for it to come back rather than drop the output.
                let next = now.addingTimeInterval(policy.delay(afterAttempts: entry.attempts + 1, retryAfter: nil))
                try await outbox.reschedule(entry.id, claim: entry.claim, owner: owner, at: next, reason: "channel '\(entry.channel)' is not configured")
                return
            }
            // A destination sealed under another key never reaches a channel (some would take it as a chat id).
            guard entry.destination != DestinationSeal.unreadable else {
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .rejected,
                                        reason: "the destination was sealed under another key (relay-secrets.key beside the database was replaced), so it cannot be read",
                                        remoteID: nil, at: now)
                return
            }
            let send = ChannelSend(id: entry.id, channel: entry.channel, destination: entry.destination, output: entry.output,
                                   attempt: entry.attempts + 1, createdAt: entry.createdAt)
            let started = ContinuousClock.now
            let outcome = await channel.attempt(send, endpoints: endpoints)
            let after = clock.now()
            if let metrics {
                metrics.duration.observe(ContinuousClock.now - started, entry.channel)
                let word = switch outcome {
                case .delivered: "delivered"
                case .retry: "retry"
                case .rejected: "rejected"
                case .failed: "failed"
                }
                metrics.sends.increment(entry.channel, word)
            }
            switch outcome {
            case .delivered(let remoteID):
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .delivered, reason: nil, remoteID: remoteID, at: after)
            case let .retry(retryAfter, reason):
                let next = after.addingTimeInterval(policy.delay(afterAttempts: entry.attempts + 1, retryAfter: retryAfter))
                if next >= entry.expiresAt {
                    try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .failed, reason: "gave up: \(reason)", remoteID: nil, at: after)
                } else {
                    try await outbox.reschedule(entry.id, claim: entry.claim, owner: owner, at: next, reason: reason)
                }
            case .rejected(let reason):
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .rejected, reason: reason, remoteID: nil, at: after)
                log.log(.warning, "channels: \(entry.channel) refused send \(entry.id): \(reason)", metadata: Self.logContext(entry))
            case .failed(let reason):
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .failed, reason: reason, remoteID: nil, at: after)
                log.log(.warning, "channels: send \(entry.id) to \(entry.channel) failed: \(reason)", metadata: Self.logContext(entry))
            }
        } catch {
            // The row keeps its lease; it becomes claimable again when the lease ends.
            log.error("channels: cannot record the outcome of send \(entry.id): \(error)")
        }
    }

    /// What a channel line names beside its text: the run that made the send, the send and its channel (never its
    /// destination, which may hold a secret, nor its text).
    static func logContext(_ entry: ChannelOutboxEntry) -> [String: String] {
        var context = ["send_id": entry.id, "channel": entry.channel]
        if let run = entry.runID { context["run_id"] = run }
        return context
    }
}

/// Empties the channel outbox: the shared outbox loop over the channel lane.
public typealias ChannelDispatcher = OutboxDispatcher<ChannelLane>
