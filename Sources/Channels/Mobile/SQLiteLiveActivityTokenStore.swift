import ChannelAPI
import Foundation
import SQLite
import Storage

/// Live Activity tokens in the data directory's SQLite file (`mobile_live_activities`, beside the devices).
public struct SQLiteLiveActivityTokenStore: LiveActivityTokenStore {
    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    public var transactions: any TransactionalStorage { database }

    public func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment, now: Date,
                         in session: any StorageSession) throws {
        try session.sqliteConnection().run("""
            INSERT INTO mobile_live_activities (device_id, session_id, agent_id, token, environment, created_at) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (device_id, session_id) DO UPDATE SET token = excluded.token, environment = excluded.environment, agent_id = excluded.agent_id
            """, deviceID, sessionID, agentID, token, environment.rawValue, now.sqliteMillis)
        // A phone keeps its newest tokens only: a session id is the caller's to choose, so they are not kept without end.
        try session.sqliteConnection().run("""
            DELETE FROM mobile_live_activities WHERE device_id = ? AND session_id NOT IN
                (SELECT session_id FROM mobile_live_activities WHERE device_id = ? ORDER BY created_at DESC, session_id DESC LIMIT ?)
            """, deviceID, deviceID, liveActivityTokensPerDevice)
    }

    public func targets(sessionID: String, subject: String) async throws -> [WakeTarget] {
        try await database.asyncRead { db in
            try db.query("""
                SELECT a.device_id, a.token, a.environment, d.bundle_id FROM mobile_live_activities a
                JOIN mobile_devices d ON d.id = a.device_id WHERE a.session_id = ? AND d.subject = ? AND d.platform = 'ios'
                ORDER BY a.device_id
                """, sessionID, subject).map {
                WakeTarget.liveActivity(deviceID: $0.string("device_id"), token: $0.string("token"), environment: $0.string("environment"),
                                        bundleID: $0.string("bundle_id"))
            }
        }
    }

    public func startTargets(subject: String) async throws -> [WakeTarget] {
        try await database.asyncRead { db in
            try db.query("""
                SELECT id, live_start_token, push_environment, bundle_id FROM mobile_devices
                WHERE subject = ? AND platform = 'ios' AND live_start_token IS NOT NULL ORDER BY id
                """, subject).map {
                WakeTarget.liveActivity(deviceID: $0.string("id"), token: $0.string("live_start_token"), environment: $0.string("push_environment"),
                                        bundleID: $0.string("bundle_id"))
            }
        }
    }
}
