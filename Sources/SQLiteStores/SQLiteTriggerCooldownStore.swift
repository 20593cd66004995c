import Foundation
import GatewayHTTP
import SQLite

/// Location triggers' cooldowns in the gateway's SQLite file (`trigger_fires`).
public struct SQLiteTriggerCooldownStore: TriggerCooldownStore {
    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    public func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) async throws -> Int? {
        let nowMS = now.sqliteMillis
        let cooldownMS = cooldown.components.seconds * 1000
        return try await database.asyncTransaction { db in
            if let last = try db.query("SELECT fired_at FROM trigger_fires WHERE agent_id = ? AND device_id = ?", agentID, deviceID).first?.int("fired_at"),
               nowMS - last < cooldownMS {
                return Int((cooldownMS - (nowMS - last) + 999) / 1000)
            }
            try db.run("INSERT INTO trigger_fires (agent_id, device_id, fired_at) VALUES (?, ?, ?) ON CONFLICT (agent_id, device_id) DO UPDATE SET fired_at = excluded.fired_at",
                       agentID, deviceID, nowMS)
            return nil
        }
    }

    public func release(agentID: String, deviceID: String) async throws {
        try await database.asyncTransaction { db in _ = try db.run("DELETE FROM trigger_fires WHERE agent_id = ? AND device_id = ?", agentID, deviceID) }
    }
}
