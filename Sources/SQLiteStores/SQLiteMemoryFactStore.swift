import ChannelAPI
import Foundation
import Memory
import SQLite
import Storage

/// Memory facts in the gateway's SQLite file (`memory_facts`, and `memory_fact_changes` for the feed and each fact's
/// history; GatewaySchema's `memory.*` migrations). SQLite has one writer, so changes are numbered (AUTOINCREMENT) in
/// the order they commit: the feed's cursor needs nothing more.
public final class SQLiteMemoryFactStore: MemoryFactStore {
    public let database: DatabasePool
    public var transactions: any TransactionalStorage { database }
    let clock: any WallClock

    public init(database: DatabasePool, clock: any WallClock = SystemWallClock()) {
        self.database = database
        self.clock = clock
    }

    private static func fact(_ row: Row) -> MemoryFact {
        MemoryFact(id: row.string("id") ?? "", subject: row.string("subject") ?? "", content: row.string("text") ?? "",
                   category: row.string("category") ?? "preference", agentID: row.string("agent_id") ?? "", status: row.string("status") ?? "active",
                   source: row.string("source") ?? "manual", createdAt: row.date("created_at") ?? Date(sqliteMillis: 0),
                   updatedAt: row.date("updated_at") ?? row.date("created_at") ?? Date(sqliteMillis: 0), expiresAt: row.date("expires_at"))
    }

    private static func fact(id: String, subject: String, in db: Connection) throws -> MemoryFact? {
        try db.query("SELECT * FROM memory_facts WHERE id = ? AND subject = ?", id, subject).first.map(Self.fact)
    }

    /// Records a change with the fact as it now is (for the sync feed and the fact's history).
    private static func record(_ event: String, fact: MemoryFact, actor: String, at now: Date, in db: Connection) throws {
        try db.run("""
            INSERT INTO memory_fact_changes (subject, fact_id, agent_id, event, content, category, status, actor, changed_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, fact.subject, fact.id, fact.agentID, event, fact.content, fact.category, fact.status, actor, now.sqliteMillis)
    }

    // MARK: Writes, in the caller's transaction

    public func add(_ content: String, subject: String, source: String, category: String, agentID: String, expiresAt: Date?,
                    in session: any StorageSession) throws -> MemoryFact {
        let db = try session.sqliteConnection()
        let kept = try db.query("SELECT COUNT(*) AS n FROM memory_facts WHERE subject = ?", subject).first?.int("n") ?? 0
        guard kept < MemoryFacts.maximumFactsPerPerson else { throw MemoryFactError.tooManyFacts }
        let fact = MemoryFact.new(content, subject: subject, source: source, category: category, agentID: agentID, expiresAt: expiresAt, now: clock.now())
        try db.run("""
            INSERT INTO memory_facts (id, subject, text, source, created_at, category, agent_id, status, expires_at, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)
            """, fact.id, subject, content, source, fact.createdAt.sqliteMillis, category, agentID, expiresAt?.sqliteMillis, fact.updatedAt.sqliteMillis)
        try Self.record("created", fact: fact, actor: fact.creator, at: fact.createdAt, in: db)
        return fact
    }

    public func update(id: String, subject: String, _ edit: MemoryFactEdit, actor: String?, in session: any StorageSession) throws -> MemoryFact? {
        let db = try session.sqliteConnection()
        let now = clock.now()
        guard let current = try Self.fact(id: id, subject: subject, in: db) else { return nil }
        let fact = edit.applied(to: current, at: now)
        try db.run("UPDATE memory_facts SET text = ?, category = ?, agent_id = ?, expires_at = ?, updated_at = ? WHERE id = ?",
                   fact.content, fact.category, fact.agentID, fact.expiresAt?.sqliteMillis, now.sqliteMillis, id)
        try Self.record("updated", fact: fact, actor: actor ?? subject, at: now, in: db)
        // Only edits lengthen a fact's history; its newest changes are kept (the feed reads the last one alone).
        try db.run("""
            DELETE FROM memory_fact_changes WHERE fact_id = ? AND cursor <= (
                SELECT cursor FROM memory_fact_changes WHERE fact_id = ? ORDER BY cursor DESC LIMIT 1 OFFSET ?)
            """, fact.id, fact.id, Int64(MemoryFacts.historyPerFact))
        return fact
    }

    public func delete(id: String, subject: String, actor: String?, in session: any StorageSession) throws -> Bool {
        let db = try session.sqliteConnection()
        guard let fact = try Self.fact(id: id, subject: subject, in: db) else { return false }
        try db.run("DELETE FROM memory_facts WHERE id = ? AND subject = ?", id, subject)
        try Self.record("deleted", fact: fact, actor: actor ?? subject, at: clock.now(), in: db)
        return true
    }

    public func purge(subject: String, agentID: String?, in session: any StorageSession) throws -> Int {
        let db = try session.sqliteConnection()
        let now = clock.now()
        let gone = try db.query("SELECT * FROM memory_facts WHERE subject = ? AND (? IS NULL OR agent_id = ?)", subject, agentID, agentID).map(Self.fact)
        for fact in gone {
            try Self.record("deleted", fact: fact, actor: subject, at: now, in: db)
        }
        try db.run("DELETE FROM memory_facts WHERE subject = ? AND (? IS NULL OR agent_id = ?)", subject, agentID, agentID)
        return gone.count
    }

    // MARK: Reads, on the pool's own threads

    public func fact(id: String, subject: String) async throws -> MemoryFact? {
        try await database.asyncRead { db in try Self.fact(id: id, subject: subject, in: db) }
    }

    public func facts(subject: String, status: String, agentID: String?, limit: Int) async throws -> [MemoryFact] {
        let now = clock.now().sqliteMillis
        return try await database.asyncRead { db in
            try db.query("""
                SELECT * FROM memory_facts WHERE subject = ? AND status = ? AND (? IS NULL OR agent_id = ?)
                    AND (status <> 'active' OR expires_at IS NULL OR expires_at > ?)
                ORDER BY created_at DESC, id LIMIT ?
                """, subject, status, agentID, agentID, now, Int64(limit)).map(Self.fact)
        }
    }

    public func changes(subject: String, since: Int64, limit: Int, agentID: String?) async throws -> MemoryFactChanges {
        try MemoryFacts.checkPage(since: since, limit: limit)
        return try await database.asyncRead { db in try db.readTransaction { db in
            // The newest cursor ever given, compacted ones included (cursors are never reused).
            let latest = try db.query("""
                SELECT MAX(COALESCE((SELECT MAX(cursor) FROM memory_fact_changes), 0), COALESCE((SELECT MAX(cursor) FROM memory_feed_floors), 0)) AS c
                """).first?.int("c") ?? 0
            if since > latest { return .resetToStart }
            // Tombstones below this person's floor were compacted away: a phone that synced before them starts afresh.
            let floor = try db.query("SELECT cursor FROM memory_feed_floors WHERE subject = ?", subject).first?.int("cursor") ?? 0
            if since > 0, since < floor { return .resetToStart }
            // Each fact's latest change after the cursor, in cursor order.
            let rows = try db.query("""
                SELECT c.cursor, c.fact_id, c.event FROM memory_fact_changes c
                JOIN (SELECT MAX(cursor) AS cursor FROM memory_fact_changes
                      WHERE subject = ? AND cursor > ? AND (? IS NULL OR agent_id = ?) GROUP BY fact_id) latest ON latest.cursor = c.cursor
                ORDER BY c.cursor LIMIT ?
                """, subject, since, agentID, agentID, Int64(limit + 1))
            var changes: [MemoryFactChange] = []
            for row in rows.prefix(limit) {
                let id = row.string("fact_id") ?? ""
                let fact = try Self.fact(id: id, subject: subject, in: db)
                changes.append(MemoryFactChange(cursor: row.int("cursor") ?? 0, factID: id, event: fact == nil ? "deleted" : (row.string("event") ?? "updated"),
                                                fact: fact))
            }
            return MemoryFactChanges(changes: changes, nextCursor: changes.last?.cursor ?? since, hasMore: rows.count > limit, reset: false)
        } }
    }

    public func compactTombstones(before: Date) async throws -> Int {
        var compacted = 0
        while true {
            let batch = try await database.asyncTransaction { db -> Int in
                let gone = try db.query("""
                    SELECT subject, fact_id, MAX(cursor) AS c FROM memory_fact_changes
                    WHERE event = 'deleted' AND changed_at < ? AND fact_id NOT IN (SELECT id FROM memory_facts)
                    GROUP BY subject, fact_id LIMIT 1000
                    """, before.sqliteMillis)
                for row in gone {
                    guard let subject = row.string("subject"), let fact = row.string("fact_id"), let cursor = row.int("c") else { continue }
                    try db.run("""
                        INSERT INTO memory_feed_floors (subject, cursor) VALUES (?, ?)
                        ON CONFLICT (subject) DO UPDATE SET cursor = MAX(cursor, excluded.cursor)
                        """, subject, cursor)
                    try db.run("DELETE FROM memory_fact_changes WHERE fact_id = ?", fact)
                }
                return gone.count
            }
            compacted += batch
            if batch < 1000 { return compacted }
        }
    }

    public func counts(subject: String) async throws -> [String: Int] {
        try await database.asyncRead { db in
            var result = Dictionary(uniqueKeysWithValues: MemoryFacts.statuses.map { ($0, 0) })
            for row in try db.query("SELECT status, count(*) AS n FROM memory_facts WHERE subject = ? GROUP BY status", subject) {
                result[row.string("status") ?? "active"] = Int(row.int("n") ?? 0)
            }
            return result
        }
    }

    public func history(id: String, subject: String) async throws -> [MemoryFactHistoryEvent] {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM memory_fact_changes WHERE fact_id = ? AND subject = ? ORDER BY cursor", id, subject).map { row in
                MemoryFactHistoryEvent(id: row.int("cursor") ?? 0, factID: id, event: row.string("event") ?? "", content: row.string("content") ?? "",
                                       category: row.string("category") ?? "", status: row.string("status") ?? "", actor: row.string("actor") ?? "",
                                       createdAt: row.date("changed_at") ?? Date(sqliteMillis: 0))
            }
        }
    }
}
