import ChannelAPI
import Foundation
import Mobile
import PostgreSQL
import Storage

/// Live Activity tokens on PostgreSQL (`mobile_live_activities`, migration mobile 3, the same rows as SQLite's), so
/// an activity registered through one node is updated by whichever node runs the agent. A registration is one upsert:
/// of two nodes registering one device's token for a session at once, the later commit's token stands.
public struct PostgresLiveActivityTokenStore: LiveActivityTokenStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public var transactions: any TransactionalStorage { pool }

    public func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment, now: Date,
                         in session: any StorageSession) throws {
        _ = try session.postgresConnection().run("""
            INSERT INTO mobile_live_activities (device_id, session_id, agent_id, token, environment, created_at) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (device_id, session_id) DO UPDATE SET token = excluded.token, environment = excluded.environment, agent_id = excluded.agent_id
            """, deviceID, sessionID, agentID, token, environment.rawValue, now.postgresMillis)
        // A phone keeps its newest tokens only: a session id is the caller's to choose, so they are not kept without end.
        _ = try session.postgresConnection().run("""
            DELETE FROM mobile_live_activities WHERE device_id = $1 AND session_id NOT IN
                (SELECT session_id FROM mobile_live_activities WHERE device_id = $1 ORDER BY created_at DESC, session_id DESC LIMIT $2)
            """, deviceID, liveActivityTokensPerDevice)
    }

    public func targets(sessionID: String, subject: String) async throws -> [WakeTarget] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT a.device_id, a.token, a.environment, d.bundle_id FROM mobile_live_activities a
                JOIN mobile_devices d ON d.id = a.device_id WHERE a.session_id = $1 AND d.subject = $2 AND d.platform = 'ios'
                ORDER BY a.device_id
                """, sessionID, subject).map {
                WakeTarget.liveActivity(deviceID: $0.string("device_id"), token: $0.string("token"), environment: $0.string("environment"),
                                        bundleID: $0.string("bundle_id"))
            }
        }
    }

    public func startTargets(subject: String) async throws -> [WakeTarget] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT id, live_start_token, push_environment, bundle_id FROM mobile_devices
                WHERE subject = $1 AND platform = 'ios' AND live_start_token IS NOT NULL ORDER BY id
                """, subject).map {
                WakeTarget.liveActivity(deviceID: $0.string("id"), token: $0.string("live_start_token"), environment: $0.string("push_environment"),
                                        bundleID: $0.string("bundle_id"))
            }
        }
    }
}
