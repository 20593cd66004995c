import Storage
import ChannelDelivery
import Foundation
import SQLite

/// One thing that happened during a run, as its page lists it.
public struct RunEvent: Sendable, Equatable {
    public var at: Date
    public var kind: String
    public var detail: String

    public init(at: Date, kind: String, detail: String) {
        self.at = at
        self.kind = kind
        self.detail = detail
    }
}

public struct RunRecord: Sendable, Equatable {
    public enum Status: String, Sendable {
        case running, succeeded, failed, interrupted
    }
    public var id: String
    public var agentID: String
    public var sessionID: String
    public var trigger: RunTrigger
    public var status: Status
    public var startedAt: Date
    public var finishedAt: Date?
    public var error: String?
    public var deliveryID: String?
    /// What happened to a result that went nowhere (`no channel 'telegram' registered`).
    public var note: String? = nil
    /// The person the run acts for; only they may read it. Scheduled runs and runs older than this column are the owner's.
    public var subject: String = "owner"
    /// The reply itself, kept in memory for the caller waiting on the run (chat); never stored here.
    public var reply: String? = nil
    /// Voice mode's short spoken version of the reply, in memory only like the reply.
    public var spokenReply: String? = nil
}

extension RunRecord {
    /// A run as it starts (what another engine's store, or a test, begins with).
    public init(id: String, agentID: String, sessionID: String, trigger: RunTrigger, status: Status = .running, startedAt: Date,
                subject: String = "owner") {
        self.id = id
        self.agentID = agentID
        self.sessionID = sessionID
        self.trigger = trigger
        self.status = status
        self.startedAt = startedAt
        self.subject = subject
    }
}

/// One fire of a schedule: the agent and the instant its cron (or one-shot) named, not when it actually ran, so
/// every node that wakes for it names the same fire.
public struct ScheduledFire: Sendable, Hashable {
    public var agentID: String
    public var at: Date

    public init(agentID: String, at: Date) {
        self.agentID = agentID
        self.at = at
    }
}

/// The run history and schedule bookkeeping, so a restart knows what was running and when each schedule last
/// fired. A protocol because a second engine (PostgreSQL, for several gateways) will keep them too.
public protocol RunStore: Sendable {
    /// Records a run's start. With `fire`, the same transaction claims that scheduled fire (a row keyed by the agent
    /// and the instant its schedule named): false, and no run recorded, when the fire was claimed already, by another
    /// gateway on the same database or before a restart. A leader may save work, but this row decides.
    func begin(_ run: RunRecord, fire: ScheduledFire?) async throws -> Bool
    /// Records the run's end; `answer`, when given, is the waiting caller's answer, recorded in the same transaction
    /// (see `TransactionalStorage.withTransaction(answering:_:)`), so a retry after a crash gets it and never a second run.
    /// Async: a run's end (and a waiting caller's answer with it) commits off the cooperative pool.
    /// `sends` are the run's outputs to channels, recorded in that same transaction (the durable hand-off).
    func finish(id: String, status: RunRecord.Status, error: String?, deliveryID: String?, note: String?, at date: Date, answer: CommitHook.Answer?,
                sends: [PendingChannelSend]) async throws
    /// Marks the runs this gateway process left "running" before a restart as interrupted; returns how many. On a
    /// database several gateways share, only this node's (`SOULACY_NODE_ID`): the others' runs are still going.
    func markInterrupted(at date: Date) async throws -> Int
    func run(id: String) async throws -> RunRecord?
    /// The person whose run a session belongs to (nil: no run has this session).
    func subject(ofSession sessionID: String) async throws -> String?
    /// Notes something that happened during a run (`retry`: a provider's call tried again) — never its prompt or output.
    func recordEvent(runID: String, kind: String, detail: String, at date: Date) async throws
    func events(runID: String) async throws -> [RunEvent]
    /// A person's latest runs of one agent, newest first.
    func recentRuns(agentID: String, subject: String, limit: Int) async throws -> [RunRecord]
    func lastFire(agentID: String) async throws -> Date?
    func recordFire(agentID: String, at date: Date) async throws
}

extension RunStore {
    public func finish(id: String, status: RunRecord.Status, error: String?, deliveryID: String?, at date: Date) async throws {
        try await finish(id: id, status: status, error: error, deliveryID: deliveryID, note: nil, at: date, answer: nil, sends: [])
    }
}

/// The run store in the gateway's SQLite file.
public final class SQLiteRunStore: RunStore {

    let database: DatabasePool
    /// Where a run's channel sends are recorded, in the transaction of its end (the same database).
    let channelOutbox: any ChannelOutbox

    public init(database: DatabasePool, channelOutbox: (any ChannelOutbox)? = nil) throws {
        self.database = database
        self.channelOutbox = channelOutbox ?? SQLiteChannelOutbox(database: database)
    }

    private static func ms(_ d: Date) -> Int64 { d.sqliteMillis }
    private static func date(_ v: Int64?) -> Date? { v.map(Date.init(sqliteMillis:)) }

    public func begin(_ run: RunRecord, fire: ScheduledFire?) async throws -> Bool {
        try await database.asyncTransaction { db in
            if let fire {
                let claimed = try db.run("INSERT INTO schedule_fires (agent_id, fire_at, run_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                                         fire.agentID, Self.ms(fire.at), run.id)
                guard claimed > 0 else { return false }
            }
            try db.run("INSERT INTO runs (id, agent_id, session_id, trigger, status, started_at, subject) VALUES (?, ?, ?, ?, 'running', ?, ?)",
                       run.id, run.agentID, run.sessionID, run.trigger.rawValue, Self.ms(run.startedAt), run.subject)
            return true
        }
    }

    public func finish(id: String, status: RunRecord.Status, error: String?, deliveryID: String?, note: String?, at date: Date,
                       answer: CommitHook.Answer?, sends: [PendingChannelSend]) async throws {
        let channelOutbox = channelOutbox
        let update = { @Sendable (db: Connection) throws -> Void in
            try db.run("UPDATE runs SET status = ?, finished_at = ?, error = ?, delivery_id = ?, note = ? WHERE id = ?",
                       status.rawValue, Self.ms(date), error, deliveryID, note, id)
            try channelOutbox.enqueue(sends, runID: id, now: date, in: db)
        }
        // The task's commit hook (a caller's idempotency line) travels with it to the database's threads.
        if let answer { try await database.asyncTransaction(answering: { _ in answer }, update) } else { try await database.asyncTransaction(update) }
    }

    public func recordEvent(runID: String, kind: String, detail: String, at date: Date) async throws {
        try await database.asyncTransaction { db in
            try db.run("INSERT INTO run_events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)", runID, Self.ms(date), kind, detail)
        }
    }

    public func events(runID: String) async throws -> [RunEvent] {
        try await database.asyncRead { db in
            try db.query("SELECT at, kind, detail FROM run_events WHERE run_id = ? ORDER BY at, rowid", runID).map {
                RunEvent(at: Date(timeIntervalSince1970: Double($0.int("at") ?? 0) / 1000), kind: $0.string("kind") ?? "", detail: $0.string("detail") ?? "")
            }
        }
    }

    /// Runs the last process left as running cannot finish any more: in SQLite every running run, since one
    /// process owns the file.
    public func markInterrupted(at date: Date) async throws -> Int {
        try await database.asyncTransaction { db in try Self.markInterrupted(at: date, in: db) }
    }

    /// The same, for the composition root while it assembles the gateway (synchronous, before anything runs).
    public func markInterruptedAtStart(at date: Date) throws -> Int {
        try database.transaction { db in try Self.markInterrupted(at: date, in: db) }
    }

    private static func markInterrupted(at date: Date, in db: Connection) throws -> Int {
        try db.run("UPDATE runs SET status = 'interrupted', finished_at = ?, error = 'the gateway stopped during the run' WHERE status = 'running'", Self.ms(date))
    }

    public func run(id: String) async throws -> RunRecord? {
        try await database.asyncRead { db in try db.query("SELECT * FROM runs WHERE id = ?", id).first.map(Self.record) }
    }

    public func recentRuns(agentID: String, subject: String, limit: Int) async throws -> [RunRecord] {
        // runs_by_agent (agent_id, started_at) walks one agent's runs newest first; the subject filter rides along.
        try await database.asyncRead { db in
            try db.query("SELECT * FROM runs WHERE agent_id = ? AND subject = ? ORDER BY started_at DESC LIMIT ?", agentID, subject, Int64(limit)).map(Self.record)
        }
    }

    /// The person whose run a session belongs to (nil: no run has this session).
    public func subject(ofSession sessionID: String) async throws -> String? {
        try await database.asyncRead { db in try db.query("SELECT subject FROM runs WHERE session_id = ? LIMIT 1", sessionID).first?.string("subject") }
    }

    private static func record(_ row: Row) -> RunRecord {
        var record = RunRecord(id: row.string("id") ?? "", agentID: row.string("agent_id") ?? "", sessionID: row.string("session_id") ?? "",
                               trigger: RunTrigger(rawValue: row.string("trigger") ?? ""), status: RunRecord.Status(rawValue: row.string("status") ?? "") ?? .failed,
                               startedAt: Self.date(row.int("started_at")) ?? Date(timeIntervalSince1970: 0),
                               finishedAt: Self.date(row.int("finished_at")), error: row.string("error"), deliveryID: row.string("delivery_id"))
        record.subject = row.string("subject") ?? "owner"
        record.note = row.string("note")
        return record
    }

    public func lastFire(agentID: String) async throws -> Date? {
        try await database.asyncRead { db in Self.date(try db.query("SELECT last_fire_at FROM schedule_state WHERE agent_id = ?", agentID).first?.int("last_fire_at")) }
    }

    public func recordFire(agentID: String, at date: Date) async throws {
        try await database.asyncTransaction { db in
            try db.run("INSERT INTO schedule_state (agent_id, last_fire_at) VALUES (?, ?) ON CONFLICT (agent_id) DO UPDATE SET last_fire_at = excluded.last_fire_at",
                       agentID, Self.ms(date))
        }
    }
}
