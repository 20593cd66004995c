import ChannelAPI
import Foundation
@_exported import Outbox
import Synchronization

/// Sends the outbox's wake-ups through each device's transport, durably: rows survive restarts, retries
/// back off, an acknowledged wake-up is never sent again, and a token the service rejects is cleared. The loop
/// (leases, the window, waiting) is the outbox dispatcher every lane shares; what a wake-up attempt is lives in
/// `PushLane`.
public final class PushDispatcher: Sendable {
    /// A lease owner name that says which process holds it: host|pid|instance.
    public static func leaseOwnerName() -> String { OutboxDispatcher<PushLane>.leaseOwnerName() }

    public let transports: WakeTransportRegistry
    public var owner: String { engine.owner }
    let engine: OutboxDispatcher<PushLane>

    /// A dispatcher over any engine's outbox and devices (several gateways on one PostgreSQL database each run one:
    /// their claims never share a row). `consoleEvents`: this node's live console updates.
    public init(outbox: any PushOutbox, devices: any DeviceRegistry, consoleEvents: ConsoleEventHub, transports: WakeTransportRegistry,
                clock: any WallClock = SystemWallClock(), policy: RetryPolicy = RetryPolicy(), log: Log = Log(), lease: TimeInterval = 60,
                batchSize: Int = 256, pollInterval: Duration = .seconds(1), metrics: MobileMetrics? = nil) {
        self.transports = transports
        engine = OutboxDispatcher(lane: PushLane(outbox: outbox, devices: devices, consoleEvents: consoleEvents, transports: transports, clock: clock,
                                                 policy: policy, log: log, metrics: metrics),
                                  clock: clock, log: log, lease: lease, batchSize: batchSize, pollInterval: pollInterval)
    }

    /// A dispatcher over the SQLite inbox's outbox and devices.
    public convenience init(store: MobileStore, transports: WakeTransportRegistry, clock: any WallClock = SystemWallClock(), policy: RetryPolicy = RetryPolicy(),
                            log: Log = Log(), lease: TimeInterval = 60, batchSize: Int = 256, pollInterval: Duration = .seconds(1), metrics: MobileMetrics? = nil) {
        self.init(outbox: store.outbox, devices: store.devices.registry, consoleEvents: store.consoleEvents, transports: transports, clock: clock,
                  policy: policy, log: log, lease: lease, batchSize: batchSize, pollInterval: pollInterval, metrics: metrics)
    }

    /// Wakes the dispatcher now (a delivery was just written); otherwise it polls every `pollInterval`.
    public func poke() { engine.poke() }

    /// Runs until cancelled.
    public func run() async { await engine.run() }

    /// Claims and sends every due wake-up once; returns how many rows it handled.
    @discardableResult
    public func dispatchDue() async -> Int { await engine.dispatchDue() }

    /// Dispatches until nothing is due (tests and shutdown).
    public func drain() async { await engine.drain() }
}

/// One wake-up attempt: the device's transport, and the outcome recorded on the row.
public final class PushLane: OutboxLane {
    public let name = "push"
    let outbox: any PushOutbox
    let devices: any DeviceRegistry
    let consoleEvents: ConsoleEventHub
    let transports: WakeTransportRegistry
    let clock: any WallClock
    let policy: RetryPolicy
    let log: Log
    private let warnedPlatforms = Mutex<Set<WakeTarget.Platform>>([])
    /// Each claimed row's device as read with its batch (nil: the device is gone), taken by the row's attempt: one
    /// read per claim instead of one per wake-up.
    private let claimedDevices = Mutex<[Int64: Device?]>([:])
    let metrics: MobileMetrics?

    init(outbox: any PushOutbox, devices: any DeviceRegistry, consoleEvents: ConsoleEventHub, transports: WakeTransportRegistry, clock: any WallClock,
         policy: RetryPolicy, log: Log, metrics: MobileMetrics?) {
        self.metrics = metrics
        self.outbox = outbox
        self.devices = devices
        self.consoleEvents = consoleEvents
        self.transports = transports
        self.clock = clock
        self.policy = policy
        self.log = log
    }

    public func releaseAbandonedLeases(ownOwner owner: String) async throws -> Int { try await outbox.releaseAbandonedLeases(ownOwner: owner) }

    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [OutboxEntry] {
        let claimed = try await outbox.claimDue(owner: owner, now: now, lease: lease, limit: limit)
        guard !claimed.isEmpty else { return claimed }
        // Read just after the claim, so a wake-up still goes to the device as it is when the row is sent.
        if let found = try? await devices.devices(ids: Set(claimed.map(\.deviceID))) {
            claimedDevices.withLock { prefetched in
                for entry in claimed { prefetched[entry.id] = .some(found[entry.deviceID]) }
            }
        }
        return claimed
    }

    /// The row's device: the one read with its claim, or read now.
    private func device(for entry: OutboxEntry) async throws -> Device? {
        if let prefetched = claimedDevices.withLock({ $0.removeValue(forKey: entry.id) }) { return prefetched }
        return try await devices.device(id: entry.deviceID)
    }

    public func nextDue() async throws -> Date? { try await outbox.nextDue() }

    private func noteMissingTransport(_ platform: WakeTarget.Platform) {
        if warnedPlatforms.withLock({ $0.insert(platform).inserted }) {
            log.warning("push: no transport configured for \(platform.rawValue) devices; their deliveries reach the inbox only")
        }
    }

    public func attempt(_ entry: OutboxEntry, owner: String) async {
        let now = clock.now()
        // The row's first settle also records when it was queued, and through which transport: that costs the line's
        // own transaction nothing, and until then the timeline reads the pending row itself.
        func path(_ events: [DeliveryEvent], transport: String?) -> [DeliveryEvent] {
            entry.attempts == 0 ? [.step(.queued, of: entry, transport: transport, at: entry.createdAt)] + events : events
        }
        // Each settle writes the row's timeline steps in its own transaction; the console hears of them after it.
        func skip(_ reason: String, state: OutboxEntry.State = .skipped, subject: String?) async throws {
            let kind: DeliveryEvent.Kind = state == .failed ? .failed : .skipped
            try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: state, transport: nil, outcome: reason, at: now,
                                    events: path([.step(kind, of: entry, transport: nil, reason: reason, at: now)], transport: nil))
            announce(entry, subject: subject)
        }
        do {
            guard let device = try await device(for: entry) else {
                try await skip("device removed", subject: nil)
                return
            }
            guard device.notificationsEnabled else {
                try await skip("notifications turned off", subject: device.subject)
                return
            }
            guard let target = device.wakeTarget else {
                try await skip("no push token", subject: device.subject)
                return
            }
            guard now < entry.expiresAt else {
                try await skip("expired before it could be sent", state: .failed, subject: device.subject)
                return
            }
            guard let transport = transports.transport(for: target) else {
                noteMissingTransport(target.platform)
                try await skip("no transport for \(target.platform.rawValue)", subject: device.subject)
                return
            }
            let attempt = await transport.attempt(entry.signal, to: target)
            metrics?.attempted(attempt, transport: transport.name, first: entry.attempts == 0)
            let after = clock.now()
            let tried = DeliveryEvent.attempt(attempt, of: entry, transport: transport.name, at: after)
            switch attempt.outcome {
            case .delivered:
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .sent, transport: transport.name, outcome: "delivered", at: after,
                                        events: path([tried, .step(.sent, of: entry, transport: transport.name, at: after)], transport: transport.name))
            case let .retry(retryAfter, reason):
                let delay = policy.delay(afterAttempts: entry.attempts + 1, retryAfter: retryAfter)
                let next = after.addingTimeInterval(delay)
                if next >= entry.expiresAt {
                    let gaveUp = "gave up: \(reason)"
                    try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .failed, transport: transport.name, outcome: gaveUp, at: after,
                                            events: path([tried, .step(.failed, of: entry, transport: transport.name, reason: gaveUp, at: after)], transport: transport.name))
                } else {
                    try await outbox.reschedule(entry.id, claim: entry.claim, owner: owner, at: next, transport: transport.name, outcome: reason,
                                                events: path([tried, .step(.retryScheduled, of: entry, transport: transport.name, reason: reason,
                                                                           nextAttemptAt: next, at: after)], transport: transport.name))
                }
            case .tokenRejected(let reason):
                try await outbox.rejectToken(entry.id, claim: entry.claim, owner: owner, deviceID: device.id, token: target.pushToken, transport: transport.name, outcome: reason, at: after,
                                             events: path([tried, .step(.tokenRejected, of: entry, transport: transport.name, reason: reason, at: after)], transport: transport.name))
                log.log(.info, "push: \(transport.name) rejected the token of device \(device.id) (\(reason)); cleared until the app registers again",
                        metadata: Self.logContext(entry, transport: transport.name))
            case .failed(let reason):
                try await outbox.settle(entry.id, claim: entry.claim, owner: owner, state: .failed, transport: transport.name, outcome: reason, at: after,
                                        events: path([tried, .step(.failed, of: entry, transport: transport.name, reason: reason, at: after)], transport: transport.name))
                log.log(.warning, "push: wake-up \(entry.wakeID.uuidString.lowercased()) for device \(device.id) failed: \(reason)",
                        metadata: Self.logContext(entry, transport: transport.name))
            }
            announce(entry, subject: device.subject)
        } catch {
            // The row keeps its lease; it becomes claimable again when the lease ends.
            log.error("push: cannot record the outcome of wake-up \(entry.id): \(error)")
        }
    }

    /// The console's live updates after a settle: the line's timeline moved, and the device's last wake-up changed.
    private func announce(_ entry: OutboxEntry, subject: String?) {
        let hub = consoleEvents
        guard let subject, hub.isHeard else { return }
        if let line = entry.deliveryID { hub.publish(.delivery(line), to: .subject(subject)) }
        hub.publish(.device(entry.deviceID), to: .subjectAndAdmins(subject))
    }

    /// What a push line names beside its text, for a log shipper to filter on: the delivery (never its content),
    /// the device and the transport.
    static func logContext(_ entry: OutboxEntry, transport: String) -> [String: String] {
        var context = ["device_id": entry.deviceID, "transport": transport]
        if let delivery = entry.deliveryID { context["delivery_id"] = delivery }
        return context
    }
}

