import Approvals
import Foundation
import SQLite
import Storage

/// Approvals in the gateway's SQLite file (`approvals`). Only this process writes the file, so there is nobody
/// else's decision to follow.
public struct SQLiteApprovalStore: ApprovalStore {
    let database: DatabasePool

    public init(database: DatabasePool) {
        self.database = database
    }

    public var storage: any TransactionalStorage { database }

    static func approval(_ row: Row) -> Approval {
        Approval(callID: row.string("call_id") ?? "", subject: row.string("subject") ?? "", agentID: row.string("agent_id") ?? "",
                 agentName: row.string("agent_name") ?? "", sessionID: row.string("session_id") ?? "", tool: row.string("tool") ?? "",
                 arguments: row.string("arguments") ?? "{}", state: Approval.State(rawValue: row.string("state") ?? "") ?? .pending,
                 decidedBy: row.string("decided_by"), decidedAt: row.date("decided_at"),
                 createdAt: row.date("created_at") ?? Date(timeIntervalSince1970: 0), expiresAt: row.date("expires_at") ?? Date(timeIntervalSince1970: 0))
    }

    public func insertIfNew(_ approval: Approval, in session: any StorageSession) throws -> (approval: Approval, created: Bool) {
        let db = try session.sqliteConnection()
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

    public func decide(callID: String, subject: String, state: Approval.State, by keyID: String, at now: Date, in session: any StorageSession) throws -> Bool {
        try session.sqliteConnection().run("""
            UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?
            WHERE call_id = ? AND subject = ? AND state = 'pending' AND expires_at > ?
            """, state.rawValue, keyID, now.sqliteMillis, callID, subject, now.sqliteMillis) == 1
    }

    public func expire(callID: String, at now: Date, in session: any StorageSession) throws -> Approval.State {
        let db = try session.sqliteConnection()
        try db.run("UPDATE approvals SET state = 'expired', decided_at = ? WHERE call_id = ? AND state = 'pending'", now.sqliteMillis, callID)
        return try db.query("SELECT state FROM approvals WHERE call_id = ?", callID).first?.string("state").flatMap(Approval.State.init(rawValue:)) ?? .expired
    }

    public func approval(callID: String, in session: any StorageSession) throws -> Approval? {
        try session.sqliteConnection().query("SELECT * FROM approvals WHERE call_id = ?", callID).first.map(Self.approval)
    }

    public func approval(callID: String) async throws -> Approval? {
        try await database.asyncRead { db in try db.query("SELECT * FROM approvals WHERE call_id = ?", callID).first.map(Self.approval) }
    }

    public func pendingCount(subject: String, at now: Date, in session: any StorageSession) throws -> Int {
        try session.sqliteConnection().query("SELECT COUNT(*) AS n FROM approvals WHERE subject = ? AND state = 'pending' AND expires_at > ?",
                                             subject, now.sqliteMillis).first?.int("n").map(Int.init) ?? 0
    }

    public func approvals(subject: String, pendingAt: Date?) async throws -> [Approval] {
        try await database.asyncRead { db in
            try db.query("SELECT * FROM approvals WHERE subject = ? \(pendingAt == nil ? "" : "AND state = 'pending' AND expires_at > ?") ORDER BY created_at DESC LIMIT 200",
                         arguments: pendingAt.map { [subject, $0.sqliteMillis] } ?? [subject]).map(Self.approval)
        }
    }

    public func otherWriters() async throws -> ApprovalHints? { nil }
}
