import ChannelAPI
import Foundation
import Synchronization

/// How long to wait between attempts: exponential with jitter, never sooner than the service asked.
public struct RetryPolicy: Sendable {
    public var initialDelay: TimeInterval
    public var maximumDelay: TimeInterval
    public var multiplier: Double

    public init(initialDelay: TimeInterval = 2, maximumDelay: TimeInterval = 15 * 60, multiplier: Double = 2) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.multiplier = multiplier
    }

    /// The delay after `attempts` failed attempts: a random point in the upper half of the exponential step.
    public func delay(afterAttempts attempts: Int, retryAfter: Duration?) -> TimeInterval {
        let step = min(maximumDelay, initialDelay * pow(multiplier, Double(max(0, attempts - 1))))
        let jittered = Double.random(in: (step / 2)...step)
        let asked = retryAfter.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 } ?? 0
        return max(jittered, asked)
    }
}

/// Sends the outbox's wake-ups through each device's transport, durably: rows survive restarts, retries
/// back off, an acknowledged wake-up is never sent again, and a token the service rejects is cleared.
public actor PushDispatcher {
    /// A lease owner name that says which process holds it: host|pid|instance.
    public static func leaseOwnerName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, buffer.count)
        let host = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return "\(host)|\(getpid())|\(UUID().uuidString.prefix(8))"
    }

    public nonisolated let store: MobileStore
    public nonisolated let transports: WakeTransportRegistry
    public nonisolated let owner: String
    let clock: any WallClock
    let policy: RetryPolicy
    let log: Log
    let lease: TimeInterval
    let batchSize: Int
    let pollInterval: Duration
    private let doorbell = Doorbell()
    private var warnedPlatforms: Set<WakeTarget.Platform> = []

    public init(store: MobileStore, transports: WakeTransportRegistry, clock: any WallClock = SystemWallClock(), policy: RetryPolicy = RetryPolicy(),
                log: Log = Log(), lease: TimeInterval = 60, batchSize: Int = 256, pollInterval: Duration = .seconds(1)) {
        self.store = store
        self.transports = transports
        self.clock = clock
        self.policy = policy
        self.log = log
        self.lease = lease
        self.batchSize = batchSize
        self.pollInterval = pollInterval
        owner = Self.leaseOwnerName()
    }

    /// Wakes the dispatcher now (a delivery was just written); otherwise it polls every `pollInterval`.
    public nonisolated func poke() { doorbell.ring() }

    /// Runs until cancelled.
    public func run() async {
        do {
            let released = try store.outbox.releaseAbandonedLeases(ownOwner: owner)
            if released > 0 { log.info("push: resumed \(released) wake-up(s) left by a stopped gateway") }
        } catch {
            log.error("push: could not release abandoned leases: \(error)")
        }
        // A sliding window, not batches: each wake-up settles on its own and frees its place at once, so one
        // slow answer never holds back the others or the next ones due.
        let inFlight = InFlightCount()
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let room = batchSize - inFlight.value
                let claimed = room > 0 ? await claimDue(limit: room) : []
                for entry in claimed {
                    inFlight.add(1)
                    group.addTask {
                        await self.dispatch(entry)
                        inFlight.add(-1)
                        self.poke()
                    }
                }
                if claimed.isEmpty { await doorbell.wait(timeout: waitTime()) }
            }
        }
    }

    /// Leases up to `limit` due wake-ups to this dispatcher (none when the outbox cannot be read; that is logged).
    private func claimDue(limit: Int) async -> [OutboxEntry] {
        do {
            return try await store.outbox.claimDue(owner: owner, now: clock.now(), lease: lease, limit: limit)
        } catch {
            log.error("push: cannot read the outbox: \(error)")
            return []
        }
    }

    private func waitTime() -> Duration {
        guard let next = try? store.outbox.nextDue() else { return pollInterval }
        let seconds = next.timeIntervalSince(clock.now())
        if seconds <= 0 { return .milliseconds(1) }
        return min(pollInterval, .milliseconds(Int64(seconds * 1000) + 1))
    }

    /// Claims and sends every due wake-up once; returns how many rows it handled.
    @discardableResult
    public func dispatchDue() async -> Int {
        let claimed = await claimDue(limit: batchSize)
        guard !claimed.isEmpty else { return 0 }
        await withTaskGroup(of: Void.self) { group in
            for entry in claimed {
                group.addTask { await self.dispatch(entry) }
            }
        }
        return claimed.count
    }

    /// Dispatches until nothing is due (tests and shutdown).
    public func drain() async {
        while await dispatchDue() > 0 {}
    }

    private func noteMissingTransport(_ platform: WakeTarget.Platform) {
        if warnedPlatforms.insert(platform).inserted {
            log.warning("push: no transport configured for \(platform.rawValue) devices; their deliveries reach the inbox only")
        }
    }

    private nonisolated func dispatch(_ entry: OutboxEntry) async {
        let outbox = store.outbox
        let now = clock.now()
        do {
            guard let device = try store.devices.device(id: entry.deviceID) else {
                try await outbox.settle(entry.id, owner: owner, state: .skipped, transport: nil, outcome: "device removed", at: now)
                return
            }
            guard device.notificationsEnabled else {
                try await outbox.settle(entry.id, owner: owner, state: .skipped, transport: nil, outcome: "notifications turned off", at: now)
                return
            }
            guard let target = device.wakeTarget else {
                try await outbox.settle(entry.id, owner: owner, state: .skipped, transport: nil, outcome: "no push token", at: now)
                return
            }
            guard now < entry.expiresAt else {
                try await outbox.settle(entry.id, owner: owner, state: .failed, transport: nil, outcome: "expired before it could be sent", at: now)
                return
            }
            guard let transport = transports.transport(for: target) else {
                await noteMissingTransport(target.platform)
                try await outbox.settle(entry.id, owner: owner, state: .skipped, transport: nil, outcome: "no transport for \(target.platform.rawValue)", at: now)
                return
            }
            let outcome = await transport.send(entry.signal, to: target)
            let after = clock.now()
            switch outcome {
            case .delivered:
                try await outbox.settle(entry.id, owner: owner, state: .sent, transport: transport.name, outcome: "delivered", at: after)
            case let .retry(retryAfter, reason):
                let delay = policy.delay(afterAttempts: entry.attempts + 1, retryAfter: retryAfter)
                let next = after.addingTimeInterval(delay)
                if next >= entry.expiresAt {
                    try await outbox.settle(entry.id, owner: owner, state: .failed, transport: transport.name, outcome: "gave up: \(reason)", at: after)
                } else {
                    try await outbox.reschedule(entry.id, owner: owner, at: next, transport: transport.name, outcome: reason)
                }
            case .tokenRejected(let reason):
                try await outbox.rejectToken(entry.id, owner: owner, deviceID: device.id, token: target.pushToken, transport: transport.name, outcome: reason, at: after)
                log.info("push: \(transport.name) rejected the token of device \(device.id) (\(reason)); cleared until the app registers again")
            case .failed(let reason):
                try await outbox.settle(entry.id, owner: owner, state: .failed, transport: transport.name, outcome: reason, at: after)
                log.warning("push: wake-up \(entry.wakeID.uuidString.lowercased()) for device \(device.id) failed: \(reason)")
            }
        } catch {
            // The row keeps its lease; it becomes claimable again when the lease ends.
            log.error("push: cannot record the outcome of wake-up \(entry.id): \(error)")
        }
    }
}

/// A wake-up call for a waiting loop; a ring with nobody waiting is kept for the next wait.
final class Doorbell: Sendable {
    private let state = Mutex<(rung: Bool, waiter: CheckedContinuation<Void, Never>?, generation: Int)>((false, nil, 0))

    func ring() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.rung = true
            return nil
        }
        waiter?.resume()
    }

    func wait(timeout: Duration) async {
        let generation = state.withLock { s -> Int in
            s.generation += 1
            return s.generation
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.expire(generation)
        }
        // Cancellation rings: a stopping dispatcher does not sit out the rest of its wait.
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.rung {
                        s.rung = false
                        return true
                    }
                    s.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            ring()
        }
        timer.cancel()
    }

    private func expire(_ generation: Int) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard s.generation == generation, let w = s.waiter else { return nil }
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }
}

/// Wake-ups being sent right now by the dispatcher's window.
final class InFlightCount: Sendable {
    private let count = Atomic<Int>(0)
    var value: Int { count.load(ordering: .acquiring) }
    func add(_ n: Int) { count.add(n, ordering: .acquiringAndReleasing) }
}
