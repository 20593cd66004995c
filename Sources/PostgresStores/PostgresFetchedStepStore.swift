import ChannelAPI
import Foundation
import Metrics
import Mobile
import PostgreSQL
import Storage

/// `fetched` steps on PostgreSQL's `mobile_delivery_events`: a batch in one transaction; a pair another gateway
/// already wrote is ignored by the partial unique index, so each phone's first fetch of a line is one step.
public struct PostgresFetchedStepWriter: FetchedStepWriter {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func write(_ steps: [FetchedStep], measuringDelay: Bool) async throws -> [(step: FetchedStep, delay: Double?)] {
        try await pool.transaction { db in
            var written: [(step: FetchedStep, delay: Double?)] = []
            for step in steps {
                let rows = try db.query("""
                    INSERT INTO mobile_delivery_events (delivery_id, device_id, kind, at) VALUES ($1, $2, 'fetched', $3)
                    ON CONFLICT (delivery_id, device_id) WHERE kind = 'fetched' DO NOTHING
                    RETURNING (SELECT created_at FROM mobile_deliveries WHERE id = $1) AS stored
                    """, step.deliveryID, step.deviceID, step.at.postgresMillis)
                guard let row = rows.first else { continue }
                let stored = measuringDelay ? row.int("stored") : nil
                written.append((step, stored.map { max(0, step.at.timeIntervalSince(Date(postgresMillis: $0))) }))
            }
            return written
        }
    }
}

extension MobileStorage {
    /// The mobile channel's stores on a PostgreSQL database several gateways share: `inbox` follows the other
    /// gateways' writes (call `followOtherWriters()` once the gateway starts).
    public static func postgres(pool: PostgresPool, inbox: PostgresInbox, clock: any WallClock = SystemWallClock(), fetchDelay: Histogram? = nil,
                                log: Log = Log()) -> MobileStorage {
        let events = inbox.consoleEvents
        return MobileStorage(transactions: pool, inbox: inbox, devices: inbox, outbox: PostgresPushOutbox(pool: pool),
                             fetches: DeliveryFetchStore(writer: PostgresFetchedStepWriter(pool: pool), clock: clock, events: events, log: log,
                                                         fetchDelay: fetchDelay),
                             timelines: PostgresDeliveryTimelineStore(pool: pool), consoleEvents: events)
    }
}
