import ChannelAPI
import Foundation
import JSON
import Metrics
import SQLite
import Synchronization

/// One `fetched` step to write: that phone was given that line at that moment.
public struct FetchedStep: Sendable, Hashable {
    public let deliveryID: String
    public let deviceID: String
    public let at: Date
}

/// Where `fetched` steps are written, on each engine: a batch in one transaction, a step already stored ignored.
/// Returns the steps written now, each with how long after its line was stored it was fetched (when asked).
public protocol FetchedStepWriter: Sendable {
    func write(_ steps: [FetchedStep], measuringDelay: Bool) async throws -> [(step: FetchedStep, delay: Double?)]
}

/// `fetched` steps in SQLite's `mobile_delivery_events`, on SQLite's own threads.
public struct SQLiteFetchedStepWriter: FetchedStepWriter {
    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    public func write(_ steps: [FetchedStep], measuringDelay: Bool) async throws -> [(step: FetchedStep, delay: Double?)] {
        try await database.asyncTransaction { db in
            var written: [(step: FetchedStep, delay: Double?)] = []
            for step in steps {
                let inserted = try db.run("""
                    INSERT OR IGNORE INTO mobile_delivery_events (delivery_id, device_id, kind, at) VALUES (?, ?, 'fetched', ?)
                    """, step.deliveryID, step.deviceID, step.at.sqliteMillis)
                guard inserted > 0 else { continue }
                let stored = measuringDelay ? try db.query("SELECT created_at FROM mobile_deliveries WHERE id = ?", step.deliveryID).first?.int("created_at") : nil
                written.append((step, stored.map { max(0, step.at.timeIntervalSince(Date(sqliteMillis: $0))) }))
            }
            return written
        }
    }
}

/// "Fetched by that phone": the inbox reads note which device read which lines, and a background flush writes
/// them, a batch at a time in one transaction, as `fetched` steps of those lines' timelines. The inbox reads are
/// the hottest path and are answered on the server thread, so noting is a short lock on a set in memory and
/// nothing else; a pair already recorded is remembered and never noted again.
public final class DeliveryFetchStore: Sendable {
    struct Pair: Hashable, Sendable {
        let deliveryID: String
        let deviceID: String
    }

    struct State {
        /// Noted and not yet written, with when and whose line it was.
        var pending: [Pair: (at: Date, subject: String)] = [:]
        /// Written already (or noted): not noted again. Bounded; forgetting only costs a no-op insert.
        var recorded: Set<Pair> = []
        var flushScheduled = false
        var flushes = 0
    }

    public static let defaultInterval: Duration = .milliseconds(250)
    static let rememberedPairs = 65_536
    static let maximumPending = 65_536

    let writer: any FetchedStepWriter
    let clock: any WallClock
    let events: ConsoleEventHub
    let interval: Duration
    let log: Log
    /// Stored → first fetched by a phone, per pair written.
    let fetchDelay: Histogram?
    private let state = Mutex(State())

    public init(writer: any FetchedStepWriter, clock: any WallClock, events: ConsoleEventHub, interval: Duration = DeliveryFetchStore.defaultInterval,
                log: Log = Log(), fetchDelay: Histogram? = nil) {
        self.fetchDelay = fetchDelay
        self.writer = writer
        self.clock = clock
        self.events = events
        self.interval = interval
        self.log = log
    }

    /// How many flush transactions have been written (each holds every pair noted since the one before).
    public var flushCount: Int { state.withLock { $0.flushes } }
    /// Pairs waiting for the next flush.
    public var pendingCount: Int { state.withLock { $0.pending.count } }

    /// `deviceID` (of `subject`) has just been given these lines. The first note of a pair schedules a flush.
    public func note(deviceID: String, subject: String, deliveryIDs: [String]) {
        guard !deliveryIDs.isEmpty else { return }
        let clock = self.clock
        let schedule = state.withLock { s -> Bool in
            var now: Date?
            for id in deliveryIDs {
                let pair = Pair(deliveryID: id, deviceID: deviceID)
                // A flood of new pairs faster than flushes drain them is dropped, never kept without bound.
                guard s.pending.count < Self.maximumPending, s.recorded.insert(pair).inserted else { continue }
                if now == nil { now = clock.now() }
                s.pending[pair] = (now!, subject)
            }
            if s.recorded.count > Self.rememberedPairs { s.recorded = Set(s.pending.keys) }
            guard !s.pending.isEmpty, !s.flushScheduled else { return false }
            s.flushScheduled = true
            return true
        }
        if schedule {
            let interval = self.interval
            Task.detached { [self] in
                try? await Task.sleep(for: interval)
                await flush()
            }
        }
    }

    /// Writes every pair noted so far in one transaction (also called on shutdown, and by tests that cannot wait).
    public func flush() async {
        let batch = state.withLock { s -> [Pair: (at: Date, subject: String)] in
            defer {
                s.pending = [:]
                s.flushScheduled = false
            }
            return s.pending
        }
        guard !batch.isEmpty else { return }
        let steps = batch.map { FetchedStep(deliveryID: $0.key.deliveryID, deviceID: $0.key.deviceID, at: $0.value.at) }
        do {
            // Off the cooperative pool, on the engine's own threads; a pair already stored is ignored.
            let written = try await writer.write(steps, measuringDelay: fetchDelay != nil)
            state.withLock { $0.flushes += 1 }
            if let fetchDelay { for case let delay? in written.map(\.delay) { fetchDelay.observe(delay, labels: []) } }
            for (step, _) in written {
                events.publish(.delivery(step.deliveryID), to: .subject(batch[Pair(deliveryID: step.deliveryID, deviceID: step.deviceID)]?.subject ?? ""))
            }
        } catch {
            // Lost: a fetched step is a convenience of the timeline, never worth retrying a broken database for.
            state.withLock { s in for pair in batch.keys { s.recorded.remove(pair) } }
            log.warning("inbox: could not record \(batch.count) fetched line(s): \(error)")
        }
    }
}
