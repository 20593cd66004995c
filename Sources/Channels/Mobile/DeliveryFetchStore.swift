import ChannelAPI
import Foundation
import JSON
import Metrics
import SQLite
import Synchronization

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

    let database: DatabasePool
    let clock: any WallClock
    let events: ConsoleEventHub
    let interval: Duration
    let log: Log
    /// Stored → first fetched by a phone, per pair written.
    let fetchDelay: Histogram?
    private let state = Mutex(State())

    public init(database: DatabasePool, clock: any WallClock, events: ConsoleEventHub, interval: Duration = DeliveryFetchStore.defaultInterval,
                log: Log = Log(), fetchDelay: Histogram? = nil) {
        self.fetchDelay = fetchDelay
        self.database = database
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
        let rows = batch.map { (pair: $0.key, at: $0.value.at, subject: $0.value.subject) }
        do {
            // Off the cooperative pool, on the database's own threads; a pair already stored is ignored by the unique index.
            let measure = fetchDelay != nil
            let (written, delays): ([Pair], [Double]) = try await database.asyncTransaction { db in
                var written: [Pair] = []
                var delays: [Double] = []
                for row in rows {
                    let inserted = try db.run("""
                        INSERT OR IGNORE INTO mobile_delivery_events (delivery_id, device_id, kind, at) VALUES (?, ?, 'fetched', ?)
                        """, row.pair.deliveryID, row.pair.deviceID, row.at.sqliteMillis)
                    guard inserted > 0 else { continue }
                    written.append(row.pair)
                    if measure, let stored = try db.query("SELECT created_at FROM mobile_deliveries WHERE id = ?", row.pair.deliveryID).first?.int("created_at") {
                        delays.append(max(0, row.at.timeIntervalSince(Date(sqliteMillis: stored))))
                    }
                }
                return (written, delays)
            }
            state.withLock { $0.flushes += 1 }
            if let fetchDelay { for delay in delays { fetchDelay.observe(delay, labels: []) } }
            let subjects = Dictionary(rows.map { ($0.pair, $0.subject) }, uniquingKeysWith: { first, _ in first })
            for pair in written { events.publish(.delivery(pair.deliveryID), to: .subject(subjects[pair] ?? "")) }
        } catch {
            // Lost: a fetched step is a convenience of the timeline, never worth retrying a broken database for.
            state.withLock { s in for pair in batch.keys { s.recorded.remove(pair) } }
            log.warning("inbox: could not record \(batch.count) fetched line(s): \(error)")
        }
    }
}
