import Foundation
import SQLite

/// When each location trigger last fired for each device, so cooldowns survive restarts and concurrent fires
/// start one run (the check and the claim are one transaction).
public final class TriggerCooldowns: Sendable {
    let database: DatabasePool

    public init(database: DatabasePool) throws {
        self.database = database
    }

    /// Claims a fire: nil when allowed (and recorded), else the seconds left of the cooldown.
    func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) throws -> Int? {
        let nowMS = now.sqliteMillis
        let cooldownMS = cooldown.components.seconds * 1000
        return try database.transaction { db in
            if let last = try db.query("SELECT fired_at FROM trigger_fires WHERE agent_id = ? AND device_id = ?", agentID, deviceID).first?.int("fired_at"),
               nowMS - last < cooldownMS {
                return Int((cooldownMS - (nowMS - last) + 999) / 1000)
            }
            try db.run("INSERT INTO trigger_fires (agent_id, device_id, fired_at) VALUES (?, ?, ?) ON CONFLICT (agent_id, device_id) DO UPDATE SET fired_at = excluded.fired_at",
                       agentID, deviceID, nowMS)
            return nil
        }
    }

    /// Gives a claimed fire back (the run could not start).
    func release(agentID: String, deviceID: String) throws {
        try database.transaction { db in try db.run("DELETE FROM trigger_fires WHERE agent_id = ? AND device_id = ?", agentID, deviceID) }
    }
}
