import Foundation
import SQLite

/// The approvals table: one row per tool call waiting for (or given) a person's yes or no.
struct ApprovalStore: Sendable {
    let database: DatabasePool

    static func approval(_ row: Row) -> Approval {
        Approval(callID: row.string("call_id") ?? "", subject: row.string("subject") ?? "", agentID: row.string("agent_id") ?? "",
                 agentName: row.string("agent_name") ?? "", sessionID: row.string("session_id") ?? "", tool: row.string("tool") ?? "",
                 arguments: row.string("arguments") ?? "{}", state: Approval.State(rawValue: row.string("state") ?? "") ?? .pending,
                 decidedBy: row.string("decided_by"), decidedAt: row.date("decided_at"),
                 createdAt: row.date("created_at") ?? Date(timeIntervalSince1970: 0), expiresAt: row.date("expires_at") ?? Date(timeIntervalSince1970: 0))
    }

    /// Stores a new request; the same call id again returns the stored one (another person's is a duplicate).
    func insertIfNew(_ approval: Approval) throws -> (approval: Approval, created: Bool) {
        try database.transaction { db in
            if let existing = try db.query("SELECT * FROM approvals WHERE call_id = ?", approval.callID).first.map(Self.approval) {
                guard existing.subject == approval.subject else { throw ApprovalError.duplicateCall(approval.callID) }
                return (existing, false)
            }
            try db.run("""
                INSERT INTO approvals (call_id, subject, agent_id, agent_name, session_id, tool, arguments, state, created_at, expires_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)
                """, approval.callID, approval.subject, approval.agentID, approval.agentName, approval.sessionID, approval.tool,
                approval.arguments, approval.createdAt.sqliteMillis, approval.expiresAt.sqliteMillis)
            return (approval, true)
        }
    }

    /// Marks a pending approval expired (if it still is) and returns its final state.
    func expire(callID: String, at now: Date) throws -> Approval.State {
        try database.transaction { db in
            try db.run("UPDATE approvals SET state = 'expired', decided_at = ? WHERE call_id = ? AND state = 'pending'", now.sqliteMillis, callID)
            return try db.query("SELECT state FROM approvals WHERE call_id = ?", callID).first?.string("state").flatMap(Approval.State.init(rawValue:)) ?? .expired
        }
    }

    func approval(callID: String) throws -> Approval? {
        try database.read { db in try db.query("SELECT * FROM approvals WHERE call_id = ?", callID).first.map(Self.approval) }
    }

    /// Newest first, at most 200; with `pendingAt`, only those still pending then.
    func approvals(subject: String, pendingAt: Date?) throws -> [Approval] {
        try database.read { db in
            try db.query("SELECT * FROM approvals WHERE subject = ? \(pendingAt == nil ? "" : "AND state = 'pending' AND expires_at > ?") ORDER BY created_at DESC LIMIT 200",
                         arguments: pendingAt.map { [subject, $0.sqliteMillis] } ?? [subject]).map(Self.approval)
        }
    }

    /// Decides a pending, unexpired approval once; true when this call decided it.
    func decide(callID: String, subject: String, state: Approval.State, by keyID: String, at now: Date) throws -> Bool {
        try database.transaction { db in
            try db.run("""
                UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?
                WHERE call_id = ? AND subject = ? AND state = 'pending' AND expires_at > ?
                """, state.rawValue, keyID, now.sqliteMillis, callID, subject, now.sqliteMillis) == 1
        }
    }
}
