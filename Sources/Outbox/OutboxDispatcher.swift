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

/// One kind of durable work the outbox dispatcher drives: phones' wake-ups, channel sends. A lane owns its rows
/// and what one attempt means; the dispatcher owns the loop every lane shares: leases, a sliding window of
/// attempts in flight, waiting until the next row is due, and waking when a row is written.
public protocol OutboxLane: Sendable {
    associatedtype Item: Sendable
    /// Names the lane in log lines ("push", "channels").
    var name: String { get }
    /// Hands back rows an earlier process of this host left leased (it died mid-attempt); returns how many.
    func releaseAbandonedLeases(ownOwner owner: String) async throws -> Int
    /// Leases up to `limit` due rows to `owner` until `now + lease`.
    func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [Item]
    /// When the next row falls due (nil: none waiting).
    func nextDue() async throws -> Date?
    /// One attempt at a claimed row, and its outcome recorded under the lease (the lane's own errors are its own).
    func attempt(_ item: Item, owner: String) async
}

/// Empties an outbox lane durably: rows survive restarts, each attempt settles on its own under its lease, and an
/// abandoned lease is taken back. One implementation for every lane.
public actor OutboxDispatcher<Lane: OutboxLane> {
    /// A lease owner name that says which process holds it: host|pid|instance.
    public static func leaseOwnerName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, buffer.count)
        let host = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return "\(host)|\(getpid())|\(UUID().uuidString.prefix(8))"
    }

    public nonisolated let lane: Lane
    public nonisolated let owner: String
    let clock: any WallClock
    let log: Log
    let lease: TimeInterval
    let batchSize: Int
    let pollInterval: Duration
    private let doorbell = Doorbell()

    public init(lane: Lane, owner: String = OutboxDispatcher.leaseOwnerName(), clock: any WallClock, log: Log, lease: TimeInterval = 60,
                batchSize: Int = 256, pollInterval: Duration = .seconds(1)) {
        self.lane = lane
        self.owner = owner
        self.clock = clock
        self.log = log
        self.lease = lease
        self.batchSize = batchSize
        self.pollInterval = pollInterval
    }

    /// Wakes the dispatcher now (a row was just written); otherwise it polls every `pollInterval`.
    public nonisolated func poke() { doorbell.ring() }

    /// Runs until cancelled.
    public func run() async {
        do {
            let released = try await lane.releaseAbandonedLeases(ownOwner: owner)
            if released > 0 { log.info("\(lane.name): resumed \(released) row(s) left by a stopped gateway") }
        } catch {
            log.error("\(lane.name): could not release abandoned leases: \(error)")
        }
        // A sliding window, not batches: each attempt settles on its own and frees its place at once, so one
        // slow answer never holds back the others or the next ones due.
        let inFlight = InFlightCount()
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let room = batchSize - inFlight.value
                let claimed = room > 0 ? await claimDue(limit: room) : []
                for item in claimed {
                    inFlight.add(1)
                    group.addTask {
                        await self.lane.attempt(item, owner: self.owner)
                        inFlight.add(-1)
                        self.poke()
                    }
                }
                if claimed.isEmpty { await doorbell.wait(timeout: await waitTime()) }
            }
        }
    }

    /// Leases up to `limit` due rows to this dispatcher (none when the outbox cannot be read; that is logged).
    private func claimDue(limit: Int) async -> [Lane.Item] {
        do {
            return try await lane.claimDue(owner: owner, now: clock.now(), lease: lease, limit: limit)
        } catch {
            log.error("\(lane.name): cannot read the outbox: \(error)")
            return []
        }
    }

    private func waitTime() async -> Duration {
        guard let next = try? await lane.nextDue() else { return pollInterval }
        let seconds = next.timeIntervalSince(clock.now())
        if seconds <= 0 { return .milliseconds(1) }
        return min(pollInterval, .milliseconds(Int64(seconds * 1000) + 1))
    }

    /// Claims and attempts every due row once; returns how many rows it handled.
    @discardableResult
    public func dispatchDue() async -> Int {
        let claimed = await claimDue(limit: batchSize)
        guard !claimed.isEmpty else { return 0 }
        await withTaskGroup(of: Void.self) { group in
            for item in claimed {
                group.addTask { await self.lane.attempt(item, owner: self.owner) }
            }
        }
        return claimed.count
    }

    /// Dispatches until nothing is due (tests and shutdown).
    public func drain() async {
        while await dispatchDue() > 0 {}
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

/// Attempts being made right now by the dispatcher's window.
final class InFlightCount: Sendable {
    private let count = Atomic<Int>(0)
    var value: Int { count.load(ordering: .acquiring) }
    func add(_ n: Int) { count.add(n, ordering: .acquiringAndReleasing) }
}

/// Lease owner names (`host|pid|instance`, `OutboxDispatcher.leaseOwnerName()`) of processes that are gone.
public enum LeaseOwners {
    /// Whether `owner`'s lease can be taken back at start: it is this host's, and its process no longer exists
    /// (or it is an earlier instance of this very process). Owners on other hosts are left to their lease time.
    public static func isAbandoned(_ owner: String, ownOwner: String) -> Bool {
        guard owner != ownOwner else { return false }
        let host = ownOwner.split(separator: "|").first.map(String.init) ?? ""
        let parts = owner.split(separator: "|")
        guard parts.count == 3, String(parts[0]) == host, let pid = Int32(parts[1]) else { return false }
        return !(kill(pid, 0) == 0 || errno == EPERM) || pid == getpid()
    }

    /// The owners among `owners` whose leases can be taken back at start.
    public static func abandoned(among owners: [String], ownOwner: String) -> [String] {
        owners.filter { isAbandoned($0, ownOwner: ownOwner) }
    }
}
