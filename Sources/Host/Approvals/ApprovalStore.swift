import Foundation
import Storage

/// Where approvals are kept: one row per tool call waiting for (or given) a person's yes or no. Writes join the
/// caller's transaction (a route answers with the decision it took, committed together); reads are async.
/// Every engine's store holds `ApprovalStoreConformance`: of racing decisions exactly one wins.
public protocol ApprovalStore: Sendable {
    /// The engine's transactions: what the broker and routes open to write through this store.
    var storage: any TransactionalStorage { get }
    /// Stores a new request; the same call id again returns the stored one (another person's throws `duplicateCall`).
    func insertIfNew(_ approval: Approval, in session: any StorageSession) throws -> (approval: Approval, created: Bool)
    /// Decides a pending, unexpired approval once: true when this call decided it.
    func decide(callID: String, subject: String, state: Approval.State, by keyID: String, at now: Date, in session: any StorageSession) throws -> Bool
    /// Marks a pending approval expired (if it still is) and returns its state afterwards.
    func expire(callID: String, at now: Date, in session: any StorageSession) throws -> Approval.State
    func approval(callID: String, in session: any StorageSession) throws -> Approval?
    func approval(callID: String) async throws -> Approval?
    /// How many of the person's approvals are pending and unexpired at `now`, read in the caller's transaction.
    func pendingCount(subject: String, at now: Date, in session: any StorageSession) throws -> Int
    /// Newest first, at most 200; with `pendingAt`, only those still pending then.
    func approvals(subject: String, pendingAt: Date?) async throws -> [Approval]
    /// Hints of decisions other processes take on the same database, so waiters parked here hear of them; nil when
    /// no other process writes this store (one gateway on its own file), so nothing needs following.
    func otherWriters() async throws -> ApprovalHints?
}

/// Decisions taken elsewhere, as hints: the table stays the truth. A waiter is answered by re-reading its row when
/// a hint names it, after every `resync` (hints may have been lost), and every `pollInterval` in any case, so a
/// pooler that breaks LISTEN costs at most that long.
public struct ApprovalHints: Sendable {
    public enum Hint: Sendable, Equatable {
        case changed(callID: String)
        case resync
    }

    public let hints: AsyncStream<Hint>
    public let pollInterval: Duration
    /// Stops the hints (the stream ends).
    public let stop: @Sendable () -> Void

    public init(hints: AsyncStream<Hint>, pollInterval: Duration, stop: @escaping @Sendable () -> Void) {
        self.hints = hints
        self.pollInterval = pollInterval
        self.stop = stop
    }
}
