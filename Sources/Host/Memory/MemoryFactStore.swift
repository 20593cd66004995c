import Foundation
import Storage

/// Adaptive-memory facts ("What it remembers", Siri's "Remember something"), each belonging to one person, with a
/// change feed the phone syncs from (cursor, tombstones) as the original's `/memory/facts/sync` answers it. A protocol:
/// each engine keeps these rows (`SQLiteMemoryFactStore` in the data directory's file, `PostgresMemoryFactStore` on a
/// database several gateways share).
///
/// Writes take the caller's session, so a route's effect commits with its answer (and its idempotency line); the
/// extension below runs each in a transaction of its own. Every write records a change: the feed's entry and the
/// fact's history. Reads are asynchronous and see what is committed.
public protocol MemoryFactStore: Sendable {
    /// The engine seam's view of the store's database: what routes build their answers in.
    var transactions: any TransactionalStorage { get }

    /// Remembers a new active fact inside the caller's transaction and returns it.
    func add(_ content: String, subject: String, source: String, category: String, agentID: String, expiresAt: Date?,
             in session: any StorageSession) throws -> MemoryFact
    /// Applies `edit` to the person's fact inside the caller's transaction; nil when the person has no such fact.
    /// `actor`: who made the change (nil: the person).
    func update(id: String, subject: String, _ edit: MemoryFactEdit, actor: String?, in session: any StorageSession) throws -> MemoryFact?
    /// Forgets the person's fact inside the caller's transaction, leaving a tombstone; false when there is none.
    func delete(id: String, subject: String, actor: String?, in session: any StorageSession) throws -> Bool
    /// Forgets all of the person's facts (one agent's with `agentID`) inside the caller's transaction; each leaves a
    /// tombstone in the feed. Returns how many went.
    func purge(subject: String, agentID: String?, in session: any StorageSession) throws -> Int

    /// The person's fact; nil when it is someone else's or gone.
    func fact(id: String, subject: String) async throws -> MemoryFact?
    /// The person's facts, newest first, at most `limit`: those of `status` (`active` ones only while unexpired),
    /// optionally only one agent's.
    func facts(subject: String, status: String, agentID: String?, limit: Int) async throws -> [MemoryFact]
    /// The person's changes after `since`, one per fact in its current state (a tombstone for a fact that is gone),
    /// oldest first, at most `limit` (`MemoryFacts.checkPage`). A change that commits after a page was read never has a
    /// cursor at or below that page's last one, so a phone following `nextCursor` misses nothing.
    func changes(subject: String, since: Int64, limit: Int, agentID: String?) async throws -> MemoryFactChanges
    /// How many of the person's facts have each status (every status of `MemoryFacts.statuses`, 0 included).
    func counts(subject: String) async throws -> [String: Int]
    /// The fact's changes, oldest first; empty when the person never had it.
    func history(id: String, subject: String) async throws -> [MemoryFactHistoryEvent]
    /// Forgets every change of facts deleted before `before` (their tombstones included), so adding and forgetting
    /// facts does not grow the feed for ever. Each person's feed remembers the newest cursor so forgotten: a phone
    /// whose cursor is below it (it may have missed a tombstone) is answered `resetToStart` and syncs afresh.
    /// Returns how many facts' changes went.
    func compactTombstones(before: Date) async throws -> Int
}

extension MemoryFactStore {
    /// Remembers a new active fact in a transaction of its own.
    public func add(_ content: String, subject: String, source: String, category: String = "preference", agentID: String = "",
                    expiresAt: Date? = nil) async throws -> MemoryFact {
        try await transactions.withTransaction { session in
            try add(content, subject: subject, source: source, category: category, agentID: agentID, expiresAt: expiresAt, in: session)
        }
    }

    /// Edits the person's fact in a transaction of its own.
    public func update(id: String, subject: String, _ edit: MemoryFactEdit, actor: String? = nil) async throws -> MemoryFact? {
        try await transactions.withTransaction { session in try update(id: id, subject: subject, edit, actor: actor, in: session) }
    }

    /// Forgets the person's fact in a transaction of its own.
    public func delete(id: String, subject: String, actor: String? = nil) async throws -> Bool {
        try await transactions.withTransaction { session in try delete(id: id, subject: subject, actor: actor, in: session) }
    }

    /// Forgets the person's facts in a transaction of its own.
    public func purge(subject: String, agentID: String? = nil) async throws -> Int {
        try await transactions.withTransaction { session in try purge(subject: subject, agentID: agentID, in: session) }
    }
}
