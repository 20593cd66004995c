import ChannelAPI
import Foundation
import Memory
import PostgreSQL
import Storage

/// Memory facts on PostgreSQL (`memory_facts`, `memory_fact_changes`: the same rows as SQLite's, times in BIGINT
/// milliseconds), shared by every gateway on the database.
///
/// The feed's cursor is a sequence (BIGSERIAL, one value at a time: no per-session cache, so values grow in the order
/// they are taken). A sequence alone is not enough: two writers take 10 and 11, 11 commits first, a phone reads 11 and
/// moves its cursor past 10, which then commits and is never synced. So every write of a person's facts first takes a
/// transaction-level advisory lock for that person (`lockFeed`): their changes are numbered one transaction at a time,
/// each after the previous one committed (PostgreSQL makes a commit visible before it releases the transaction's
/// locks), and the feed is read per person. Different people's writes never wait for each other.
public struct PostgresMemoryFactStore: MemoryFactStore {
    public static let migrations = [
        PostgresMigration(module: "memory", version: 1, sql: """
            CREATE TABLE memory_facts (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                text TEXT NOT NULL,
                source TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                category TEXT NOT NULL DEFAULT 'preference',
                agent_id TEXT NOT NULL DEFAULT '',
                status TEXT NOT NULL DEFAULT 'active',
                expires_at BIGINT,
                updated_at BIGINT NOT NULL
            );
            CREATE INDEX memory_facts_by_subject ON memory_facts (subject, created_at);
            CREATE TABLE memory_fact_changes (
                cursor BIGSERIAL PRIMARY KEY,
                subject TEXT NOT NULL,
                fact_id TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                event TEXT NOT NULL,
                content TEXT NOT NULL DEFAULT '',
                category TEXT NOT NULL DEFAULT '',
                status TEXT NOT NULL DEFAULT '',
                actor TEXT NOT NULL DEFAULT '',
                changed_at BIGINT NOT NULL
            );
            CREATE INDEX memory_fact_changes_by_subject ON memory_fact_changes (subject, cursor);
            CREATE INDEX memory_fact_changes_by_fact ON memory_fact_changes (fact_id, cursor);
            """),
        // Each person's feed floor: the newest cursor whose tombstones housekeeping has compacted away.
        PostgresMigration(module: "memory", version: 2, sql: "CREATE TABLE memory_feed_floors (subject TEXT PRIMARY KEY, cursor BIGINT NOT NULL);"),
    ]

    let pool: PostgresPool
    let clock: any WallClock
    public var transactions: any TransactionalStorage { pool }

    public init(pool: PostgresPool, clock: any WallClock = SystemWallClock()) {
        self.pool = pool
        self.clock = clock
    }

    private static let factColumns = "id, subject, text, source, created_at, category, agent_id, status, expires_at, updated_at"

    private static func fact(_ row: PostgresRow) -> MemoryFact {
        MemoryFact(id: row.string("id") ?? "", subject: row.string("subject") ?? "", content: row.string("text") ?? "",
                   category: row.string("category") ?? "preference", agentID: row.string("agent_id") ?? "", status: row.string("status") ?? "active",
                   source: row.string("source") ?? "manual", createdAt: Date(postgresMillis: row.int("created_at") ?? 0),
                   updatedAt: Date(postgresMillis: row.int("updated_at") ?? row.int("created_at") ?? 0),
                   expiresAt: row.int("expires_at").map { Date(postgresMillis: $0) })
    }

    private static func fact(id: String, subject: String, in db: PostgresConnection) throws -> MemoryFact? {
        try db.query("SELECT \(factColumns) FROM memory_facts WHERE id = $1 AND subject = $2", id, subject).first.map(Self.fact)
    }

    /// Serialises the person's feed writes until this transaction ends (see the type's comment). Taken before the
    /// fact is read, it also keeps two edits of one fact from overwriting each other.
    private static func lockFeed(subject: String, in db: PostgresConnection) throws {
        _ = try db.query("SELECT pg_advisory_xact_lock(hashtext('memory_fact_changes'), hashtext($1::text))", subject)
    }

    /// Records a change with the fact as it now is (for the sync feed and the fact's history); under `lockFeed`.
    private static func record(_ event: String, fact: MemoryFact, actor: String, at now: Date, in db: PostgresConnection) throws {
        try db.run("""
            INSERT INTO memory_fact_changes (subject, fact_id, agent_id, event, content, category, status, actor, changed_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            """, fact.subject, fact.id, fact.agentID, event, fact.content, fact.category, fact.status, actor, now.postgresMillis)
    }

    // MARK: Writes, in the caller's transaction

    public func add(_ content: String, subject: String, source: String, category: String, agentID: String, expiresAt: Date?,
                    in session: any StorageSession) throws -> MemoryFact {
        let db = try session.postgresConnection()
        try Self.lockFeed(subject: subject, in: db)
        let kept = try db.query("SELECT COUNT(*) AS n FROM memory_facts WHERE subject = $1", subject).first?.int("n") ?? 0
        guard kept < MemoryFacts.maximumFactsPerPerson else { throw MemoryFactError.tooManyFacts }
        let fact = MemoryFact.new(content, subject: subject, source: source, category: category, agentID: agentID, expiresAt: expiresAt, now: clock.now())
        try db.run("""
            INSERT INTO memory_facts (id, subject, text, source, created_at, category, agent_id, status, expires_at, updated_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $9)
            """, fact.id, subject, content, source, fact.createdAt.postgresMillis, category, agentID, expiresAt?.postgresMillis, fact.updatedAt.postgresMillis)
        try Self.record("created", fact: fact, actor: fact.creator, at: fact.createdAt, in: db)
        return fact
    }

    public func update(id: String, subject: String, _ edit: MemoryFactEdit, actor: String?, in session: any StorageSession) throws -> MemoryFact? {
        let db = try session.postgresConnection()
        try Self.lockFeed(subject: subject, in: db)
        let now = clock.now()
        guard let current = try Self.fact(id: id, subject: subject, in: db) else { return nil }
        let fact = edit.applied(to: current, at: now)
        try db.run("UPDATE memory_facts SET text = $1, category = $2, agent_id = $3, expires_at = $4, updated_at = $5 WHERE id = $6",
                   fact.content, fact.category, fact.agentID, fact.expiresAt?.postgresMillis, now.postgresMillis, id)
        try Self.record("updated", fact: fact, actor: actor ?? subject, at: now, in: db)
        // Only edits lengthen a fact's history; its newest changes are kept (the feed reads the last one alone).
        try db.run("""
            DELETE FROM memory_fact_changes WHERE fact_id = $1 AND cursor <= (
                SELECT cursor FROM memory_fact_changes WHERE fact_id = $1 ORDER BY cursor DESC LIMIT 1 OFFSET $2)
            """, fact.id, Int64(MemoryFacts.historyPerFact))
        return fact
    }

    public func delete(id: String, subject: String, actor: String?, in session: any StorageSession) throws -> Bool {
        let db = try session.postgresConnection()
        try Self.lockFeed(subject: subject, in: db)
        guard let fact = try db.query("DELETE FROM memory_facts WHERE id = $1 AND subject = $2 RETURNING \(Self.factColumns)", id, subject)
            .first.map(Self.fact) else { return false }
        try Self.record("deleted", fact: fact, actor: actor ?? subject, at: clock.now(), in: db)
        return true
    }

    public func purge(subject: String, agentID: String?, in session: any StorageSession) throws -> Int {
        let db = try session.postgresConnection()
        try Self.lockFeed(subject: subject, in: db)
        let now = clock.now()
        let gone = try db.query("""
            DELETE FROM memory_facts WHERE subject = $1 AND ($2::text IS NULL OR agent_id = $2) RETURNING \(Self.factColumns)
            """, subject, agentID).map(Self.fact).sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        for fact in gone {
            try Self.record("deleted", fact: fact, actor: subject, at: now, in: db)
        }
        return gone.count
    }

    // MARK: Reads

    public func fact(id: String, subject: String) async throws -> MemoryFact? {
        try await pool.withConnection { db in try Self.fact(id: id, subject: subject, in: db) }
    }

    public func facts(subject: String, status: String, agentID: String?, limit: Int) async throws -> [MemoryFact] {
        let now = clock.now().postgresMillis
        return try await pool.withConnection { db in
            try db.query("""
                SELECT \(Self.factColumns) FROM memory_facts WHERE subject = $1 AND status = $2 AND ($3::text IS NULL OR agent_id = $3)
                    AND (status <> 'active' OR expires_at IS NULL OR expires_at > $4)
                ORDER BY created_at DESC, id COLLATE "C" LIMIT $5
                """, subject, status, agentID, now, Int64(limit)).map(Self.fact)
        }
    }

    public func changes(subject: String, since: Int64, limit: Int, agentID: String?) async throws -> MemoryFactChanges {
        try MemoryFacts.checkPage(since: since, limit: limit)
        // One snapshot for the whole page: the newest cursor, the changes and the facts they name agree.
        return try await pool.transaction(isolation: .repeatableRead) { db in
            // The newest cursor ever given, compacted ones included (cursors are never reused).
            let latest = try db.query("""
                SELECT GREATEST(COALESCE((SELECT MAX(cursor) FROM memory_fact_changes), 0), COALESCE((SELECT MAX(cursor) FROM memory_feed_floors), 0)) AS c
                """).first?.int("c") ?? 0
            if since > latest { return .resetToStart }
            // Tombstones below this person's floor were compacted away: a phone that synced before them starts afresh.
            let floor = try db.query("SELECT cursor FROM memory_feed_floors WHERE subject = $1", subject).first?.int("cursor") ?? 0
            if since > 0, since < floor { return .resetToStart }
            // Each fact's latest change after the cursor, in cursor order, with the fact as it is now (none: a tombstone).
            let rows = try db.query("""
                SELECT c.cursor, c.fact_id, c.event, f.id, f.subject, f.text, f.source, f.created_at, f.category, f.agent_id, f.status,
                       f.expires_at, f.updated_at
                FROM memory_fact_changes c
                JOIN (SELECT MAX(cursor) AS cursor FROM memory_fact_changes
                      WHERE subject = $1 AND cursor > $2 AND ($3::text IS NULL OR agent_id = $3) GROUP BY fact_id) latest ON latest.cursor = c.cursor
                LEFT JOIN memory_facts f ON f.id = c.fact_id AND f.subject = $1
                ORDER BY c.cursor LIMIT $4
                """, subject, since, agentID, Int64(limit + 1))
            let changes = rows.prefix(limit).map { row in
                let fact = row.string("id") == nil ? nil : Self.fact(row)
                return MemoryFactChange(cursor: row.int("cursor") ?? 0, factID: row.string("fact_id") ?? "",
                                        event: fact == nil ? "deleted" : (row.string("event") ?? "updated"), fact: fact)
            }
            return MemoryFactChanges(changes: changes, nextCursor: changes.last?.cursor ?? since, hasMore: rows.count > limit, reset: false)
        }
    }

    public func compactTombstones(before: Date) async throws -> Int {
        var compacted = 0
        while true {
            let batch = try await pool.transaction { db -> Int in
                let gone = try db.query("""
                    SELECT subject, fact_id, MAX(cursor) AS c FROM memory_fact_changes c
                    WHERE event = 'deleted' AND changed_at < $1 AND NOT EXISTS (SELECT 1 FROM memory_facts f WHERE f.id = c.fact_id)
                    GROUP BY subject, fact_id LIMIT 1000
                    """, before.postgresMillis)
                for row in gone {
                    guard let subject = row.string("subject"), let fact = row.string("fact_id"), let cursor = row.int("c") else { continue }
                    try db.run("""
                        INSERT INTO memory_feed_floors (subject, cursor) VALUES ($1, $2)
                        ON CONFLICT (subject) DO UPDATE SET cursor = GREATEST(memory_feed_floors.cursor, excluded.cursor)
                        """, subject, cursor)
                    try db.run("DELETE FROM memory_fact_changes WHERE fact_id = $1", fact)
                }
                return gone.count
            }
            compacted += batch
            if batch < 1000 { return compacted }
        }
    }

    public func counts(subject: String) async throws -> [String: Int] {
        try await pool.withConnection { db in
            var result = Dictionary(uniqueKeysWithValues: MemoryFacts.statuses.map { ($0, 0) })
            for row in try db.query("SELECT status, count(*) AS n FROM memory_facts WHERE subject = $1 GROUP BY status", subject) {
                result[row.string("status") ?? "active"] = Int(row.int("n") ?? 0)
            }
            return result
        }
    }

    public func history(id: String, subject: String) async throws -> [MemoryFactHistoryEvent] {
        try await pool.withConnection { db in
            try db.query("""
                SELECT cursor, event, content, category, status, actor, changed_at FROM memory_fact_changes
                WHERE fact_id = $1 AND subject = $2 ORDER BY cursor
                """, id, subject).map { row in
                MemoryFactHistoryEvent(id: row.int("cursor") ?? 0, factID: id, event: row.string("event") ?? "", content: row.string("content") ?? "",
                                       category: row.string("category") ?? "", status: row.string("status") ?? "", actor: row.string("actor") ?? "",
                                       createdAt: Date(postgresMillis: row.int("changed_at") ?? 0))
            }
        }
    }
}
