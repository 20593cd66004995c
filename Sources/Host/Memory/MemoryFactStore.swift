import Storage
import ChannelAPI
import Crypto
import Foundation
import SQLite

/// Adaptive-memory facts ("What it remembers", Siri's "Remember something"), each belonging to one person, with a
/// change feed the phone syncs from (cursor, tombstones) as the original's `/memory/facts/sync` answers it.
public final class MemoryFactStore: Sendable {
    public static let maximumLength = 400
    public static let builtInCategories = ["preference", "identity", "constraint", "entity"]
    /// How many facts, at most, go into a model's system message.
    public static let promptFacts = 5


    public struct Fact: Sendable, Equatable {
        public var id: String
        public var subject: String
        public var content: String
        public var category: String
        public var agentID: String
        public var status: String
        public var source: String
        public var createdAt: Date
        public var updatedAt: Date
        public var expiresAt: Date?
    }

    /// One entry of the change feed: a fact's current state, or a tombstone.
    public struct Change: Sendable, Equatable {
        public var cursor: Int64
        public var factID: String
        public var event: String
        public var fact: Fact?
    }

    /// What a fact edit may change; nil leaves a field as it is.
    public struct Edit: Sendable {
        public var content: String?
        public var category: String?
        public var agentID: String?
        /// `.some(nil)` clears the expiry.
        public var expiresAt: Date??

        public init(content: String? = nil, category: String? = nil, agentID: String? = nil, expiresAt: Date?? = nil) {
            self.content = content
            self.category = category
            self.agentID = agentID
            self.expiresAt = expiresAt
        }
    }

    public let database: DatabasePool
    /// The engine seam's view of the same database: what routes build their answers in.
    public var transactions: any TransactionalStorage { database }
    let clock: any WallClock

    public init(database: DatabasePool, clock: any WallClock = SystemWallClock()) throws {
        self.database = database
        self.clock = clock
    }

    private static func fact(_ row: Row) -> Fact {
        Fact(id: row.string("id") ?? "", subject: row.string("subject") ?? "", content: row.string("text") ?? "",
             category: row.string("category") ?? "preference", agentID: row.string("agent_id") ?? "", status: row.string("status") ?? "active",
             source: row.string("source") ?? "manual", createdAt: row.date("created_at") ?? Date(sqliteMillis: 0),
             updatedAt: row.date("updated_at") ?? row.date("created_at") ?? Date(sqliteMillis: 0), expiresAt: row.date("expires_at"))
    }

    /// One entry of a fact's history: what it was after each change, and who made the change.
    public struct HistoryEvent: Sendable, Equatable {
        public var id: Int64
        public var factID: String
        public var event: String
        public var content: String
        public var category: String
        public var status: String
        public var actor: String
        public var createdAt: Date
    }

    /// Records a change with the fact as it now is (for the sync feed and the fact's history).
    private static func record(_ event: String, fact: Fact, actor: String, at now: Date, in db: Connection) throws {
        try db.run("""
            INSERT INTO memory_fact_changes (subject, fact_id, agent_id, event, content, category, status, actor, changed_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, fact.subject, fact.id, fact.agentID, event, fact.content, fact.category, fact.status, actor, now.sqliteMillis)
    }

    /// The fact's changes, oldest first; empty when the person never had it.
    public func history(id: String, subject: String) throws -> [HistoryEvent] {
        try database.read { db in
            try db.query("SELECT * FROM memory_fact_changes WHERE fact_id = ? AND subject = ? ORDER BY cursor", id, subject).map { row in
                HistoryEvent(id: row.int("cursor") ?? 0, factID: id, event: row.string("event") ?? "", content: row.string("content") ?? "",
                             category: row.string("category") ?? "", status: row.string("status") ?? "", actor: row.string("actor") ?? "",
                             createdAt: row.date("changed_at") ?? Date(sqliteMillis: 0))
            }
        }
    }

    public func add(_ content: String, subject: String, source: String, category: String = "preference", agentID: String = "",
                    expiresAt: Date? = nil) throws -> Fact {
        let now = clock.now()
        let fact = Fact(id: "fact_" + Hex.encode(SecureBytes.random(count: 8)), subject: subject, content: content, category: category, agentID: agentID,
                        status: "active", source: source, createdAt: now, updatedAt: now, expiresAt: expiresAt)
        try database.transaction { db in
            try db.run("""
                INSERT INTO memory_facts (id, subject, text, source, created_at, category, agent_id, status, expires_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)
                """, fact.id, subject, content, source, now.sqliteMillis, category, agentID, expiresAt?.sqliteMillis, now.sqliteMillis)
            try Self.record("created", fact: fact, actor: source == "extracted" ? source : subject, at: now, in: db)
        }
        return fact
    }

    public func fact(id: String, subject: String) throws -> Fact? {
        try database.read { db in try db.query("SELECT * FROM memory_facts WHERE id = ? AND subject = ?", id, subject).first.map(Self.fact) }
    }

    /// The person's facts, newest first: `status` (default active, unexpired), optionally one agent's.
    public func facts(subject: String, status: String = "active", agentID: String? = nil, limit: Int = 200) throws -> [Fact] {
        let now = clock.now().sqliteMillis
        return try database.read { db in
            try db.query("""
                SELECT * FROM memory_facts WHERE subject = ? AND status = ? AND (? IS NULL OR agent_id = ?)
                    AND (status <> 'active' OR expires_at IS NULL OR expires_at > ?)
                ORDER BY created_at DESC, id LIMIT ?
                """, subject, status, agentID, agentID, now, Int64(limit)).map(Self.fact)
        }
    }

    public func update(id: String, subject: String, _ edit: Edit, actor: String? = nil) throws -> Fact? {
        let now = clock.now()
        return try database.transaction { db in
            guard var fact = try db.query("SELECT * FROM memory_facts WHERE id = ? AND subject = ?", id, subject).first.map(Self.fact) else { return nil }
            if let content = edit.content { fact.content = content }
            if let category = edit.category { fact.category = category }
            if let agentID = edit.agentID { fact.agentID = agentID }
            if let expiresAt = edit.expiresAt { fact.expiresAt = expiresAt }
            fact.updatedAt = now
            try db.run("UPDATE memory_facts SET text = ?, category = ?, agent_id = ?, expires_at = ?, updated_at = ? WHERE id = ?",
                       fact.content, fact.category, fact.agentID, fact.expiresAt?.sqliteMillis, now.sqliteMillis, id)
            try Self.record("updated", fact: fact, actor: actor ?? subject, at: now, in: db)
            return fact
        }
    }

    public func delete(id: String, subject: String, actor: String? = nil) throws -> Bool {
        let now = clock.now()
        return try database.transaction { db in
            guard let fact = try db.query("SELECT * FROM memory_facts WHERE id = ? AND subject = ?", id, subject).first.map(Self.fact) else { return false }
            try db.run("DELETE FROM memory_facts WHERE id = ? AND subject = ?", id, subject)
            try Self.record("deleted", fact: fact, actor: actor ?? subject, at: now, in: db)
            return true
        }
    }

    /// Forgets all of the person's facts (one agent's with `agentID`); each leaves a tombstone in the feed.
    public func purge(subject: String, agentID: String? = nil) throws -> Int {
        let now = clock.now()
        return try database.transaction { db in
            let gone = try db.query("SELECT * FROM memory_facts WHERE subject = ? AND (? IS NULL OR agent_id = ?)", subject, agentID, agentID).map(Self.fact)
            for fact in gone {
                try Self.record("deleted", fact: fact, actor: subject, at: now, in: db)
            }
            try db.run("DELETE FROM memory_facts WHERE subject = ? AND (? IS NULL OR agent_id = ?)", subject, agentID, agentID)
            return gone.count
        }
    }

    /// Changes after `since`, one per fact in its current state, oldest first; `reset` when `since` is ahead of
    /// anything this gateway wrote (a phone synced with another database): drop the copy and start from 0.
    public func changes(subject: String, since: Int64, limit: Int, agentID: String? = nil) throws -> (changes: [Change], nextCursor: Int64, hasMore: Bool, reset: Bool) {
        try database.read { db in
            let latest = try db.query("SELECT COALESCE(MAX(cursor), 0) AS c FROM memory_fact_changes").first?.int("c") ?? 0
            if since > latest { return ([], 0, false, true) }
            // Each fact's latest change after the cursor, in cursor order.
            let rows = try db.query("""
                SELECT c.cursor, c.fact_id, c.event FROM memory_fact_changes c
                JOIN (SELECT MAX(cursor) AS cursor FROM memory_fact_changes
                      WHERE subject = ? AND cursor > ? AND (? IS NULL OR agent_id = ?) GROUP BY fact_id) latest ON latest.cursor = c.cursor
                ORDER BY c.cursor LIMIT ?
                """, subject, since, agentID, agentID, Int64(limit + 1))
            var changes: [Change] = []
            for row in rows.prefix(limit) {
                let id = row.string("fact_id") ?? ""
                let fact = try db.query("SELECT * FROM memory_facts WHERE id = ? AND subject = ?", id, subject).first.map(Self.fact)
                changes.append(Change(cursor: row.int("cursor") ?? 0, factID: id, event: fact == nil ? "deleted" : (row.string("event") ?? "updated"), fact: fact))
            }
            return (changes, changes.last?.cursor ?? since, rows.count > limit, false)
        }
    }

    public func counts(subject: String) throws -> [String: Int] {
        try database.read { db in
            var result = ["active": 0, "superseded": 0, "retracted": 0]
            for row in try db.query("SELECT status, count(*) AS n FROM memory_facts WHERE subject = ? GROUP BY status", subject) {
                result[row.string("status") ?? "active"] = Int(row.int("n") ?? 0)
            }
            return result
        }
    }
}

