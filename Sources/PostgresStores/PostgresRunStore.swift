import Agents
import ChannelDelivery
import Foundation
import PostgreSQL
import Storage

/// The run history and schedule bookkeeping on PostgreSQL: the same rows as SQLite's (`runs`, `run_events`,
/// `schedule_state`, `schedule_fires`), shared by every gateway on the database. A scheduled fire is claimed by its
/// `schedule_fires` row in the transaction that records the run it starts, so of several gateways waking for one fire
/// exactly one runs it; a run's end, its channel sends and a waiting caller's answer commit as one.
public struct PostgresRunStore: RunStore {
    public static let migrations = [
        PostgresMigration(module: "runs", version: 1, sql: """
            CREATE TABLE runs (
                id TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                trigger TEXT NOT NULL,
                status TEXT NOT NULL,
                started_at BIGINT NOT NULL,
                finished_at BIGINT,
                error TEXT,
                delivery_id TEXT,
                subject TEXT NOT NULL DEFAULT 'owner',
                note TEXT,
                node_id TEXT NOT NULL
            );
            CREATE INDEX runs_by_agent ON runs (agent_id, started_at);
            CREATE INDEX runs_by_session ON runs (session_id);
            CREATE TABLE run_events (
                id BIGSERIAL PRIMARY KEY,
                run_id TEXT NOT NULL,
                at BIGINT NOT NULL,
                kind TEXT NOT NULL,
                detail TEXT NOT NULL
            );
            CREATE INDEX run_events_run ON run_events (run_id, at);
            CREATE TABLE schedule_state (
                agent_id TEXT PRIMARY KEY,
                last_fire_at BIGINT NOT NULL
            );
            CREATE TABLE schedule_fires (
                agent_id TEXT NOT NULL,
                fire_at BIGINT NOT NULL,
                run_id TEXT NOT NULL,
                PRIMARY KEY (agent_id, fire_at)
            );
            """),
    ]

    let pool: PostgresPool
    /// Where a run's channel sends are recorded, in the transaction of its end (the same database).
    let channelOutbox: any ChannelOutbox
    /// The gateway process this store records runs for (`SOULACY_NODE_ID`): at start a node marks only its own
    /// left-over runs interrupted, never those other nodes are running.
    let node: String

    public init(pool: PostgresPool, channelOutbox: any ChannelOutbox, node: String) {
        self.pool = pool
        self.channelOutbox = channelOutbox
        self.node = node
    }

    public func begin(_ run: RunRecord, fire: ScheduledFire?) async throws -> Bool {
        try await pool.transaction { db in
            if let fire {
                // A concurrent claim of the same fire waits on the key's lock, then inserts nothing (or, if the
                // first one rolled back, claims it itself).
                let claimed = try db.run("INSERT INTO schedule_fires (agent_id, fire_at, run_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                                         fire.agentID, fire.at.postgresMillis, run.id)
                guard claimed > 0 else { return false }
            }
            try db.run("""
                INSERT INTO runs (id, agent_id, session_id, trigger, status, started_at, subject, node_id) VALUES ($1, $2, $3, $4, 'running', $5, $6, $7)
                """, run.id, run.agentID, run.sessionID, run.trigger.rawValue, run.startedAt.postgresMillis, run.subject, node)
            return true
        }
    }

    public func finish(id: String, status: RunRecord.Status, error: String?, deliveryID: String?, note: String?, at date: Date,
                       answer: CommitHook.Answer?, sends: [PendingChannelSend]) async throws {
        let channelOutbox = channelOutbox
        let update = { @Sendable (session: any StorageSession) throws -> Void in
            try session.postgresConnection().run("""
                UPDATE runs SET status = $1, finished_at = $2, error = $3, delivery_id = $4, note = $5 WHERE id = $6
                """, status.rawValue, date.postgresMillis, error, deliveryID, note, id)
            try channelOutbox.enqueue(sends, runID: id, now: date, in: session)
        }
        // The task's commit hook (a caller's idempotency line) runs in this transaction; the answer is recorded in it too.
        if let answer { try await pool.withTransaction(answering: { _ in answer }, update) } else { try await pool.withTransaction(update) }
    }

    public func recordEvent(runID: String, kind: String, detail: String, at date: Date) async throws {
        _ = try await pool.transaction { db in
            try db.run("INSERT INTO run_events (run_id, at, kind, detail) VALUES ($1, $2, $3, $4)", runID, date.postgresMillis, kind, detail)
        }
    }

    public func events(runID: String) async throws -> [RunEvent] {
        // The serial id orders events of one instant as they were recorded (SQLite's rowid).
        try await pool.withConnection { db in
            try db.query("SELECT at, kind, detail FROM run_events WHERE run_id = $1 ORDER BY at, id", runID).map {
                RunEvent(at: Date(postgresMillis: $0.int("at") ?? 0), kind: $0.string("kind") ?? "", detail: $0.string("detail") ?? "")
            }
        }
    }

    /// This node's runs left running by its previous process; other nodes' runs are theirs to end.
    public func markInterrupted(at date: Date) async throws -> Int {
        try await pool.transaction { db in
            try db.run("""
                UPDATE runs SET status = 'interrupted', finished_at = $1, error = 'the gateway stopped during the run'
                WHERE status = 'running' AND node_id = $2
                """, date.postgresMillis, node)
        }
    }

    public func run(id: String) async throws -> RunRecord? {
        try await pool.withConnection { db in try db.query("SELECT * FROM runs WHERE id = $1", id).first.map(Self.record) }
    }

    public func recentRuns(agentID: String, subject: String, limit: Int) async throws -> [RunRecord] {
        // runs_by_agent (agent_id, started_at) walks one agent's runs newest first; the subject filter rides along.
        try await pool.withConnection { db in
            try db.query("SELECT * FROM runs WHERE agent_id = $1 AND subject = $2 ORDER BY started_at DESC, id DESC LIMIT $3",
                         agentID, subject, Int64(max(0, limit))).map(Self.record)
        }
    }

    /// The person whose run a session belongs to (nil: no run has this session).
    public func subject(ofSession sessionID: String) async throws -> String? {
        try await pool.withConnection { db in try db.query("SELECT subject FROM runs WHERE session_id = $1 LIMIT 1", sessionID).first?.string("subject") }
    }

    private static func record(_ row: PostgresRow) -> RunRecord {
        var record = RunRecord(id: row.string("id") ?? "", agentID: row.string("agent_id") ?? "", sessionID: row.string("session_id") ?? "",
                               trigger: RunTrigger(rawValue: row.string("trigger") ?? ""),
                               status: RunRecord.Status(rawValue: row.string("status") ?? "") ?? .failed,
                               startedAt: Date(postgresMillis: row.int("started_at") ?? 0), subject: row.string("subject") ?? "owner")
        record.finishedAt = row.int("finished_at").map { Date(postgresMillis: $0) }
        record.error = row.string("error")
        record.deliveryID = row.string("delivery_id")
        record.note = row.string("note")
        return record
    }

    public func lastFire(agentID: String) async throws -> Date? {
        try await pool.withConnection { db in
            try db.query("SELECT last_fire_at FROM schedule_state WHERE agent_id = $1", agentID).first?.int("last_fire_at").map { Date(postgresMillis: $0) }
        }
    }

    public func recordFire(agentID: String, at date: Date) async throws {
        _ = try await pool.transaction { db in
            try db.run("""
                INSERT INTO schedule_state (agent_id, last_fire_at) VALUES ($1, $2)
                ON CONFLICT (agent_id) DO UPDATE SET last_fire_at = GREATEST(schedule_state.last_fire_at, excluded.last_fire_at)
                """, agentID, date.postgresMillis)
        }
    }
}
