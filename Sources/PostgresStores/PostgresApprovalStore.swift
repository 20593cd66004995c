import Approvals
import Foundation
import PostgreSQL
import Storage

/// Approvals on PostgreSQL (`approvals`, the same rows as SQLite's), shared by every gateway process on the
/// database. A decision is one conditional UPDATE, so of racing decisions on any nodes exactly one wins; it sends
/// a NOTIFY naming the call in its own transaction (PostgreSQL delivers it only on commit), which the other nodes'
/// listeners turn into a re-read of the row: the hint is tiny and carries nothing of the request.
public struct PostgresApprovalStore: ApprovalStore {
    public static let migrations = [
        PostgresMigration(module: "approvals", version: 1, sql: """
            CREATE TABLE approvals (
                call_id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                agent_name TEXT NOT NULL,
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
                decided_by TEXT,
                decided_at BIGINT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL
            );
            CREATE INDEX approvals_by_subject ON approvals (subject, state, created_at);
            """),
        // The count of a person's waiting approvals before each ask, from the index alone (see SQLite's approvals.2).
        PostgresMigration(module: "approvals", version: 2, sql: "CREATE INDEX approvals_waiting ON approvals (subject, state, expires_at);"),
    ]

    /// The NOTIFY channel decisions are announced on.
    public static let channel = "soulacy_approvals"

    let pool: PostgresPool
    let listenURL: String?
    let pollInterval: Duration

    /// `listenURL`: the database to LISTEN on for other nodes' decisions (the pool's own URL); nil for poll only,
    /// behind a connection pooler that breaks LISTEN. `pollInterval`: how often waiters' rows are read regardless.
    public init(pool: PostgresPool, listenURL: String?, pollInterval: Duration = .milliseconds(1500)) {
        self.pool = pool
        self.listenURL = listenURL
        self.pollInterval = pollInterval
    }

    public var storage: any TransactionalStorage { pool }

    static func approval(_ row: PostgresRow) -> Approval {
        Approval(callID: row.string("call_id") ?? "", subject: row.string("subject") ?? "", agentID: row.string("agent_id") ?? "",
                 agentName: row.string("agent_name") ?? "", sessionID: row.string("session_id") ?? "", tool: row.string("tool") ?? "",
                 arguments: row.string("arguments") ?? "{}", state: Approval.State(rawValue: row.string("state") ?? "") ?? .pending,
                 decidedBy: row.string("decided_by"), decidedAt: row.int("decided_at").map(Date.init(postgresMillis:)),
                 createdAt: Date(postgresMillis: row.int("created_at") ?? 0), expiresAt: Date(postgresMillis: row.int("expires_at") ?? 0))
    }

    public func insertIfNew(_ approval: Approval, in session: any StorageSession) throws -> (approval: Approval, created: Bool) {
        let db = try session.postgresConnection()
        // A concurrent insert of the same call id waits here for the other transaction, then reads its row.
        let inserted = try db.query("""
            INSERT INTO approvals (call_id, subject, agent_id, agent_name, session_id, tool, arguments, state, created_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9)
            ON CONFLICT (call_id) DO NOTHING RETURNING call_id
            """, approval.callID, approval.subject, approval.agentID, approval.agentName, approval.sessionID, approval.tool,
            approval.arguments, approval.createdAt.postgresMillis, approval.expiresAt.postgresMillis)
        if !inserted.isEmpty { return (approval, true) }
        guard let existing = try self.approval(callID: approval.callID, in: session) else { throw ApprovalError.notFound(approval.callID) }
        guard existing.subject == approval.subject else { throw ApprovalError.duplicateCall(approval.callID) }
        return (existing, false)
    }

    public func decide(callID: String, subject: String, state: Approval.State, by keyID: String, at now: Date, in session: any StorageSession) throws -> Bool {
        let db = try session.postgresConnection()
        // The row lock serializes racing decisions; the loser re-checks `state = 'pending'` after the winner commits.
        let decided = try db.run("""
            UPDATE approvals SET state = $1, decided_by = $2, decided_at = $3
            WHERE call_id = $4 AND subject = $5 AND state = 'pending' AND expires_at > $3
            """, state.rawValue, keyID, now.postgresMillis, callID, subject) == 1
        if decided { try db.notify(channel: Self.channel, payload: callID) }
        return decided
    }

    public func expire(callID: String, at now: Date, in session: any StorageSession) throws -> Approval.State {
        let db = try session.postgresConnection()
        if try db.run("UPDATE approvals SET state = 'expired', decided_at = $1 WHERE call_id = $2 AND state = 'pending'", now.postgresMillis, callID) == 1 {
            try db.notify(channel: Self.channel, payload: callID)
            return .expired
        }
        return try db.query("SELECT state FROM approvals WHERE call_id = $1", callID).first?.string("state").flatMap(Approval.State.init(rawValue:)) ?? .expired
    }

    public func approval(callID: String, in session: any StorageSession) throws -> Approval? {
        try session.postgresConnection().query("SELECT * FROM approvals WHERE call_id = $1", callID).first.map(Self.approval)
    }

    public func approval(callID: String) async throws -> Approval? {
        try await pool.withConnection { db in try db.query("SELECT * FROM approvals WHERE call_id = $1", callID).first.map(Self.approval) }
    }

    public func pendingCount(subject: String, at now: Date, in session: any StorageSession) throws -> Int {
        try session.postgresConnection().query("SELECT COUNT(*) AS n FROM approvals WHERE subject = $1 AND state = 'pending' AND expires_at > $2",
                                               subject, now.postgresMillis).first?.int("n").map(Int.init) ?? 0
    }

    public func approvals(subject: String, pendingAt: Date?) async throws -> [Approval] {
        try await pool.withConnection { db in
            if let pendingAt {
                return try db.query("""
                    SELECT * FROM approvals WHERE subject = $1 AND state = 'pending' AND expires_at > $2 ORDER BY created_at DESC LIMIT 200
                    """, subject, pendingAt.postgresMillis).map(Self.approval)
            }
            return try db.query("SELECT * FROM approvals WHERE subject = $1 ORDER BY created_at DESC LIMIT 200", subject).map(Self.approval)
        }
    }

    /// One listening connection for this store (the broker asks once per process); after a lost connection it says
    /// `resync`, since decisions in between were not heard.
    public func otherWriters() async throws -> ApprovalHints? {
        guard let listenURL else {
            let (hints, continuation) = AsyncStream.makeStream(of: ApprovalHints.Hint.self)
            return ApprovalHints(hints: hints, pollInterval: pollInterval, stop: { continuation.finish() })
        }
        let listener = try await PostgresListener.start(url: listenURL, channels: [Self.channel], applicationName: "soulacy-approvals")
        let hints = AsyncStream<ApprovalHints.Hint> { continuation in
            let relay = Task {
                for await event in listener.events {
                    switch event {
                    case .notification(let note): continuation.yield(.changed(callID: note.payload))
                    case .reconnected: continuation.yield(.resync)
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in relay.cancel() }
        }
        return ApprovalHints(hints: hints, pollInterval: pollInterval, stop: { listener.stop() })
    }
}
