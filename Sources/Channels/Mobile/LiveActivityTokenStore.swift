import ChannelAPI
import Foundation
import SQLite

/// Per-activity update tokens the phones report, in SQLite.
public struct LiveActivityTokens: Sendable {
    let database: DatabasePool

    public func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment, now: Date) throws {
        try database.transaction { db in
            try db.run("""
                INSERT INTO mobile_live_activities (device_id, session_id, agent_id, token, environment, created_at) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (device_id, session_id) DO UPDATE SET token = excluded.token, environment = excluded.environment, agent_id = excluded.agent_id
                """, deviceID, sessionID, agentID, token, environment.rawValue, now.sqliteMillis)
        }
    }

    /// Where updates for a session go: each reported activity token, on an iOS device of `subject`.
    func targets(sessionID: String, subject: String) throws -> [WakeTarget] {
        try database.read { db in
            try db.query("""
                SELECT a.device_id, a.token, a.environment, d.bundle_id FROM mobile_live_activities a
                JOIN mobile_devices d ON d.id = a.device_id WHERE a.session_id = ? AND d.subject = ? AND d.platform = 'ios'
                """, sessionID, subject).map {
                WakeTarget(deviceID: $0.string("device_id") ?? "", platform: .ios, pushToken: $0.string("token") ?? "",
                           environment: WakeTarget.Environment(rawValue: $0.string("environment") ?? "") ?? .production, bundleID: $0.string("bundle_id") ?? Device.iosBundleID)
            }
        }
    }

    /// Where a push-to-start goes: every iOS phone of `subject` that sent a start token (the feature is on).
    func startTargets(subject: String) throws -> [WakeTarget] {
        try database.read { db in
            try db.query("SELECT id, live_start_token, push_environment, bundle_id FROM mobile_devices WHERE subject = ? AND platform = 'ios' AND live_start_token IS NOT NULL", subject).map {
                WakeTarget(deviceID: $0.string("id") ?? "", platform: .ios, pushToken: $0.string("live_start_token") ?? "",
                           environment: WakeTarget.Environment(rawValue: $0.string("push_environment") ?? "") ?? .production, bundleID: $0.string("bundle_id") ?? Device.iosBundleID)
            }
        }
    }
}
