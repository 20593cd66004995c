import Foundation
import GatewayHTTP
import PostgreSQL
import Storage

/// Location triggers' cooldowns on PostgreSQL (`trigger_fires`, the same rows as SQLite's), shared by every node on
/// the database: a claim is one conditional upsert, so two nodes firing one trigger at once let exactly one through.
public struct PostgresTriggerCooldownStore: TriggerCooldownStore {
    public static let migrations = [
        PostgresMigration(module: "triggers", version: 1, sql: """
            CREATE TABLE trigger_fires (
                agent_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                fired_at BIGINT NOT NULL,
                PRIMARY KEY (agent_id, device_id)
            );
            """),
    ]

    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) async throws -> Int? {
        let nowMS = now.postgresMillis
        let cooldownMS = cooldown.components.seconds * 1000
        return try await pool.transaction { db in
            // The row is written only when no fire of the pair is within the cooldown; a concurrent claim waits on the
            // row's lock and then sees the fire that won.
            let claimed = try db.query("""
                INSERT INTO trigger_fires (agent_id, device_id, fired_at) VALUES ($1, $2, $3)
                ON CONFLICT (agent_id, device_id) DO UPDATE SET fired_at = excluded.fired_at
                WHERE trigger_fires.fired_at <= $3 - $4
                RETURNING fired_at
                """, agentID, deviceID, nowMS, cooldownMS)
            guard claimed.isEmpty else { return nil }
            let last = try db.query("SELECT fired_at FROM trigger_fires WHERE agent_id = $1 AND device_id = $2", agentID, deviceID).first?.int("fired_at") ?? nowMS
            return Int(max(1, (cooldownMS - (nowMS - last) + 999) / 1000))
        }
    }

    public func release(agentID: String, deviceID: String) async throws {
        _ = try await pool.transaction { db in try db.run("DELETE FROM trigger_fires WHERE agent_id = $1 AND device_id = $2", agentID, deviceID) }
    }
}
