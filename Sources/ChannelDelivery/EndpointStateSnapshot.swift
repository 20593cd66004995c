import ChannelAPI
import Synchronization

/// The endpoints channels disabled, read through a per-channel snapshot at most `maximumAge` old: every attempt asks
/// whether its endpoint is disabled, and the answer changes only on a 410 Gone or a config change, so one read of
/// the channel's records serves every send made meanwhile (it was a database read, a thread hop each way, per send).
///
/// This process's own changes (`disable`, `enable`) are seen at once. Another process's (several gateways on one
/// PostgreSQL, or on one SQLite file) are seen within `maximumAge`; until then a send to an endpoint it disabled is
/// tried, gets the 410 itself, and is rejected the same way.
public final class EndpointStateSnapshot: EndpointStateStore {
    public let store: any EndpointStateStore
    public let maximumAge: Duration
    /// The clock the snapshot's age is read from; a test passes one it moves itself.
    private let now: @Sendable () -> ContinuousClock.Instant

    private struct Held {
        var records: [String: DisabledEndpoint]
        var readAt: ContinuousClock.Instant
    }

    private struct State {
        var held: [String: Held] = [:]
        /// A read under way per channel, which every attempt that finds no fresh snapshot waits for.
        var reading: [String: Task<[String: DisabledEndpoint], any Error>] = [:]
        /// Counts this process's changes: a read begun before one is never kept as the snapshot.
        var generation = 0
    }

    private let state = Mutex(State())

    public init(_ store: any EndpointStateStore, maximumAge: Duration = .seconds(1),
                now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.store = store
        self.maximumAge = maximumAge
        self.now = now
    }

    public func disabled(channel: String, endpoint: String) async throws -> DisabledEndpoint? {
        try await records(of: channel)[endpoint]
    }

    /// Always from the store: the console's list, which is rare.
    public func disabled(channel: String) async throws -> [DisabledEndpoint] {
        try await store.disabled(channel: channel)
    }

    public func disable(_ record: DisabledEndpoint) async throws {
        defer { forget(record.channel) }
        try await store.disable(record)
    }

    public func enable(channel: String, endpoint: String) async throws {
        defer { forget(channel) }
        try await store.enable(channel: channel, endpoint: endpoint)
    }

    private enum Lookup {
        case fresh([String: DisabledEndpoint])
        case wait(Task<[String: DisabledEndpoint], any Error>)
        case read(Task<[String: DisabledEndpoint], any Error>, generation: Int, startedAt: ContinuousClock.Instant)
    }

    private func records(of channel: String) async throws -> [String: DisabledEndpoint] {
        let now = self.now()
        let lookup = state.withLock { s -> Lookup in
            if let held = s.held[channel], now - held.readAt < maximumAge { return .fresh(held.records) }
            if let reading = s.reading[channel] { return .wait(reading) }
            let store = self.store
            let task = Task {
                Dictionary(try await store.disabled(channel: channel).map { ($0.endpoint, $0) }, uniquingKeysWith: { _, last in last })
            }
            s.reading[channel] = task
            return .read(task, generation: s.generation, startedAt: now)
        }
        switch lookup {
        case .fresh(let records):
            return records
        case .wait(let task):
            return try await task.value
        case let .read(task, generation, startedAt):
            let result = await task.result
            state.withLock { s in
                if s.reading[channel] == task { s.reading[channel] = nil }
                if case .success(let records) = result, s.generation == generation { s.held[channel] = Held(records: records, readAt: startedAt) }
            }
            return try result.get()
        }
    }

    /// Drops the channel's snapshot after a change made here, and keeps any read begun before it from becoming one.
    private func forget(_ channel: String) {
        state.withLock { s in
            s.generation += 1
            s.held[channel] = nil
            s.reading[channel] = nil
        }
    }
}
